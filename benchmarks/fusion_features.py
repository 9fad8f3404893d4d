"""Eight cheap pandas features that all read ``text`` (for the fusion benchmark)."""

from __future__ import annotations

import pandas as pd

from omnitable.features.definition import feature


@feature(inputs=["text"], outputs={"f_len": "int"}, version="1")
def f_len(text: pd.Series) -> pd.Series:
    return text.str.len()


@feature(inputs=["text"], outputs={"f_words": "int"}, version="1")
def f_words(text: pd.Series) -> pd.Series:
    return text.str.count(" ") + 1


@feature(inputs=["text"], outputs={"f_upper": "int"}, version="1")
def f_upper(text: pd.Series) -> pd.Series:
    return text.str.count(r"[A-Z]")


@feature(inputs=["text"], outputs={"f_digits": "int"}, version="1")
def f_digits(text: pd.Series) -> pd.Series:
    return text.str.count(r"[0-9]")


@feature(inputs=["text"], outputs={"f_url": "boolean"}, version="1")
def f_url(text: pd.Series) -> pd.Series:
    return text.str.contains("http", regex=False)


@feature(inputs=["text"], outputs={"f_cap": "boolean"}, version="1")
def f_cap(text: pd.Series) -> pd.Series:
    return text.str[:1].str.isupper()


@feature(inputs=["text"], outputs={"f_period": "boolean"}, version="1")
def f_period(text: pd.Series) -> pd.Series:
    return text.str.endswith(".")


@feature(inputs=["text"], outputs={"f_first_word": "string"}, version="1")
def f_first_word(text: pd.Series) -> pd.Series:
    return text.str.split(" ", n=1).str[0]


ALL = (f_len, f_words, f_upper, f_digits, f_url, f_cap, f_period, f_first_word)
