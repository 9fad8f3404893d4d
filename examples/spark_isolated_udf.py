"""Isolated pandas UDFs in plain PySpark: bad records become NULL, the job completes.

A quality-score feature that raises on one record and loops forever on another, and a native
call that segfaults on a third. Wrapped with ``omnitable.isolation.isolated`` the job
completes; the failed records are NULL and their errors are visible as extra struct fields.

Run: .venv/bin/python examples/spark_isolated_udf.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import ctypes
import sys
import tempfile

import pandas as pd
from pyspark.sql.functions import pandas_udf

import omnitable
from omnitable.isolation import failure_counter, isolated, isolated_schema

DOCS = [
    (1, "the quick brown fox jumps over the lazy dog"),
    (2, "<corrupt>"),
    (3, "spark arrow pandas spark arrow"),
    (4, "<hangs>"),
    (5, "omni table omni table omni"),
    (6, "<native crash>"),
]


def quality(text: pd.Series) -> pd.Series:
    """Distinct-word ratio per document (a per-record Python feature)."""

    def one(doc: str) -> float:
        if doc == "<corrupt>":
            raise ValueError("cannot parse document")
        if doc == "<hangs>":
            while True:  # a pure-Python infinite loop: stopped by the per-record timeout
                pass
        words = doc.split()
        return len(set(words)) / len(words)

    return text.map(one)


def native_length(text: pd.Series) -> pd.Series:
    """A native call that segfaults on one record: only the child process can contain it."""
    if (text == "<native crash>").any():
        ctypes.string_at(0)
    return text.str.len().astype("float64")


def main(warehouse: str) -> None:
    spark = omnitable.spark_session(warehouse, master="local[2]", **{"spark.ui.enabled": "false"})
    docs = spark.createDataFrame(DOCS, "id long, text string")

    # 1. failed records become NULL; a Spark accumulator counts them by kind
    counter = failure_counter(spark)
    score = pandas_udf(
        isolated(quality, timeout_s=0.5, call_timeout_s=2.0, memory_mb=512, counter=counter),
        "double",
    )
    docs.select("id", score("text").alias("quality")).orderBy("id").show()
    print("failed records by kind:", counter.value)

    # 2. the same, with the error of each failed record in extra struct fields
    checked = pandas_udf(
        isolated(quality, timeout_s=0.5, call_timeout_s=2.0, errors="column"),
        isolated_schema("double"),
    )
    (
        docs.select("id", checked("text").alias("r"))
        .select("id", "r.value", "r.error_kind", "r.error_type", "r.error_message")
        .orderBy("id")
        .show(truncate=50)
    )

    # 3. a segfault, contained by the supervised child process
    length = pandas_udf(isolated(native_length, mode="subprocess"), "double")
    docs.select("id", length("text").alias("n_chars")).orderBy("id").show()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-isolated-"))
