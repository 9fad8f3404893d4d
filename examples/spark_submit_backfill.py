"""A feature backfill as a batch job submitted with spark-submit.

    WH=/tmp/omnitable-example
    .venv/bin/python -m omnitable.spark.submit_args "$WH"        # prints the --jars/--conf flags
    .venv/bin/spark-submit $(.venv/bin/python -m omnitable.spark.submit_args "$WH") \\
        --master 'local[2]' examples/spark_submit_backfill.py "$WH"

It creates a small `notes` table the first time, registers the demo's text features
(omnitable.demo.features: clean_text → n_chars/n_words/ascii_ratio/has_url → quality), prints the
plan, runs it on the submitted Spark application and prints the status grid. Run it again:
nothing is recomputed.
"""

from __future__ import annotations

import sys

import pyarrow as pa
from pyspark.sql import SparkSession

import omnitable
from omnitable.demo import features as demo_features


def main(warehouse: str) -> None:
    spark = SparkSession.builder.appName("omnitable-backfill").getOrCreate()
    wh = omnitable.connect(warehouse)
    if "notes" not in wh.tables():
        notes = wh.create_table("notes", {"text": "string"})
        notes.append(
            pa.table(
                {
                    "text": [
                        "Spark   jobs read  https://spark.apache.org docs",
                        "Wide tables hide  the physical layout",
                        "Ünïcödé text counts too",
                    ]
                }
            ),
            "notes/v1",
        )
    notes = wh.table("notes")
    notes.register(*demo_features.ALL)
    plan = notes.backfill("quality")
    print(plan.explain())
    result = plan.run(spark)
    print(f"run {result.run_id}: committed versions {result.versions}")
    print(notes.status())
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "omnitable-warehouse")
