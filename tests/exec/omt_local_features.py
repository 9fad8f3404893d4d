"""Features the ``python`` engine tests backfill (an importable module, as features must be)."""

from __future__ import annotations

import sys
import time

import pandas as pd

import omnitable

TYPED = {
    "i8": "tinyint",
    "i16": "smallint",
    "i32": "int",
    "i64": "bigint",
    "f32": "float",
    "f64": "double",
    "s": "string",
    "b": "boolean",
    "d": "date",
    "dec": "decimal(10,2)",
    "bin": "binary",
}


@omnitable.feature(inputs=list(TYPED), outputs={"seen": "string"}, version="1")
def seen(*cols: pd.Series) -> pd.Series:
    """What pandas got, exactly: each column's dtype and each value's Python type and repr."""
    frame = pd.DataFrame(dict(zip(TYPED, cols, strict=True)))
    dtypes = ",".join(f"{c}:{frame[c].dtype}" for c in TYPED)
    rows = [
        dtypes + "|" + "|".join(f"{type(v).__name__}:{v!r}" for v in row)
        for row in frame.itertuples(index=False)
    ]
    return pd.Series(rows, dtype="object")


@omnitable.feature(inputs=["i64", "f64"], outputs={"total": "double"}, version="1")
def total(i64: pd.Series, f64: pd.Series) -> pd.Series:
    return (i64.astype("float64") + f64).astype("float64")


@omnitable.feature(inputs=["s"], outputs={"shout": "string"}, version="1")
def chatty(s: pd.Series) -> pd.Series:
    """Prints to stdout and stderr and reads stdin (the local worker's protocol must not
    mind)."""
    print("chatty on stdout", len(s), flush=True)
    print("chatty on stderr", len(s), file=sys.stderr, flush=True)
    assert sys.stdin.read() == ""  # the worker's requests are out of the feature's reach
    return s.str.upper()


@omnitable.feature(inputs=["ts"], outputs={"hour": "int"}, version="1")
def hour(ts: pd.Series) -> pd.Series:
    return ts.dt.hour


@omnitable.feature(inputs=["x2"], outputs={"plus_one": "bigint"}, version="1")
def plus_one(x2: pd.Series) -> pd.Series:
    return x2 + 1


@omnitable.feature(inputs=["s"], outputs={"slow": "string"}, version="1")
def slow(s: pd.Series) -> pd.Series:
    """Takes a minute (the tests interrupt it)."""
    time.sleep(60)
    return s
