"""Feature definitions used by the feature tests (an importable module, as features must be)."""

from __future__ import annotations

import pandas as pd

import omnitable


@omnitable.feature(inputs=["text"], outputs={"clean": "string"}, version="1")
def clean(text: pd.Series) -> pd.Series:
    return text.str.strip().str.lower()


@omnitable.feature(inputs=["clean"], outputs={"n_chars": "int"}, version="1")
def n_chars(clean: pd.Series) -> pd.Series:
    return clean.str.len()


@omnitable.feature(
    inputs=["clean"], outputs={"n_words": "int", "has_digit": "boolean"}, version="1"
)
def words(clean: pd.Series) -> pd.DataFrame:
    return pd.DataFrame(
        {"n_words": clean.str.split().str.len(), "has_digit": clean.str.contains(r"\d")}
    )


@omnitable.feature(inputs=["n_chars", "n_words"], outputs={"quality": "double"}, version="1")
def quality(n_chars: pd.Series, n_words: pd.Series) -> pd.Series:
    return (n_chars / n_words.clip(lower=1)).astype("float64")


def _clean_v2(text: pd.Series) -> pd.Series:
    return text.str.strip().str.lower().str.replace(r"\s+", " ", regex=True)


clean_v2 = omnitable.feature(
    inputs=["text"], outputs={"clean": "string"}, version="2", name="clean"
)(_clean_v2)


@omnitable.feature(inputs=["text"], outputs={"shout": "string"}, version="1")
def shout(text: pd.Series) -> pd.Series:
    return text.str.upper()


@omnitable.feature(inputs=["text"], outputs={"first_char": "string"}, version="1")
def first_char(text: pd.Series) -> pd.Series:
    return text.str[:1]
