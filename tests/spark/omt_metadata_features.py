"""A pandas feature for the metadata table tests: it fails on records holding ``RAISE`` (they
land in the error table) and upper-cases the others."""

from __future__ import annotations

import pandas as pd

import omnitable


def _shout_one(text: str) -> str:
    if "RAISE" in text:
        raise ValueError(f"cannot shout {text!r}")
    return text.upper()


@omnitable.feature(inputs=["text"], outputs={"shout": "string"}, version="1")
def shout(text: pd.Series) -> pd.Series:
    return pd.Series([_shout_one(t) for t in text], dtype="object")
