"""Features of the demo's ``docs`` table: a small, realistic text-preparation chain.

text → clean_text → (n_chars, n_words, ascii_ratio, has_url) → quality

The level-2 features all read ``clean_text`` and run fused in one scan; ``quality`` is a Spark SQL
feature evaluated in the JVM.
"""

from __future__ import annotations

import pandas as pd

from omnitable import feature, sql_feature


@feature(inputs=["text"], outputs={"clean_text": "string"}, version="1")
def clean_text(text: pd.Series) -> pd.Series:
    """Collapse whitespace and drop Debian copyright boilerplate markers."""
    return (
        text.fillna("")
        .str.replace(r"[ \t]+", " ", regex=True)
        .str.replace(r"\n\s*\n+", "\n\n", regex=True)
        .str.strip()
    )


@feature(inputs=["clean_text"], outputs={"n_chars": "int"}, version="1")
def n_chars(clean_text: pd.Series) -> pd.Series:
    return clean_text.str.len()


@feature(inputs=["clean_text"], outputs={"n_words": "int"}, version="1")
def n_words(clean_text: pd.Series) -> pd.Series:
    return clean_text.str.count(r"\S+")


@feature(inputs=["clean_text"], outputs={"ascii_ratio": "double"}, version="1")
def ascii_ratio(clean_text: pd.Series) -> pd.Series:
    ascii_chars = clean_text.str.count(r"[\x00-\x7f]")
    return (ascii_chars / clean_text.str.len().clip(lower=1)).astype("float64")


@feature(inputs=["clean_text"], outputs={"has_url": "boolean"}, version="1")
def has_url(clean_text: pd.Series) -> pd.Series:
    return clean_text.str.contains(r"https?://", regex=True)


quality = sql_feature(
    "quality",
    "round(least(1.0, n_words / 400.0) * ascii_ratio * CASE WHEN has_url THEN 1.0 ELSE 0.8 END, 3)",
    "double",
    "1",
    inputs=["n_words", "ascii_ratio", "has_url"],
)

ALL = (clean_text, n_chars, n_words, ascii_ratio, has_url, quality)
