"""Importable merge policies for the upsert tests ("module:function" references)."""

from __future__ import annotations

import os

import pandas as pd


def add_labels(stored: pd.DataFrame, incoming: pd.DataFrame) -> pd.DataFrame:
    """The sum of the stored and incoming ``label``; the other columns as incoming."""
    out = incoming.copy()
    out["label"] = stored["label"] + incoming["label"]
    return out


def add_labels_but_not_13(stored: pd.DataFrame, incoming: pd.DataFrame) -> pd.DataFrame:
    """``add_labels``, failing on any incoming label 13 (isolation rejects only those rows)."""
    if (incoming["label"] == 13).any():
        raise ValueError("unlucky 13")
    return add_labels(stored, incoming)


def add_labels_but_exit_on_13(stored: pd.DataFrame, incoming: pd.DataFrame) -> pd.DataFrame:
    """``add_labels``, ending its process on any incoming label 13 (like a crash in C code)."""
    if (incoming["label"] == 13).any():
        os._exit(3)
    return add_labels(stored, incoming)
