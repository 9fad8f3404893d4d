"""A feature backfill as a batch job submitted with spark-submit.

    WH=/tmp/omnitable-example
    .venv/bin/python -m omnitable.spark.submit_args "$WH"        # prints the --jars/--conf flags
    .venv/bin/spark-submit $(.venv/bin/python -m omnitable.spark.submit_args "$WH") \\
        --master 'local[2]' examples/spark_submit_backfill.py "$WH"

It creates a small `notes` table the first time, registers the demo's text features
(omnitable.demo.features: clean_text → n_chars/n_words/ascii_ratio/has_url → quality), prints the
plan, runs it on the submitted Spark application and prints the status grid. Run it again:
nothing is recomputed.

With ``--queue`` after the warehouse, the job is one worker of the plan's durable work queue:
submit it several times at once (once the table exists) and the jobs share the plan's work
items through the catalog, each committing the chunks it leased (docs/features.md, "Work
queue").
"""

from __future__ import annotations

import sys

import pyarrow as pa
from pyspark.sql import SparkSession

import omnitable
from omnitable.demo import features as demo_features


def main(warehouse: str, queue: bool = False) -> None:
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
    result = plan.run(spark, queue=queue, checkpoint_fragments=1 if queue else None)
    print(f"run {result.run_id}: committed versions {result.versions}")
    print(notes.status())
    spark.stop()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--queue"]
    main(args[0] if args else "omnitable-warehouse", "--queue" in sys.argv[1:])
