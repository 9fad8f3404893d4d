"""Reading logical wide tables from Spark: DataFrame API, SQL catalog, time travel, pushdown.

Builds a small warehouse with the Python API, then reads it through the Spark connector.
Run: .venv/bin/python examples/spark_read.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np
import pyarrow as pa

import omnitable


def build(warehouse: str) -> int:
    """Two batches of web pages, then a `quality` feature for part of them; returns version 2."""
    wh = omnitable.connect(warehouse)
    web = wh.create_table(
        "web",
        {"url": "string", "text": "string", "lang": "string", "length": "int"},
        groups={"payload": ["text"]},  # the wide text has its own column files
    )
    rng = np.random.default_rng(0)
    for b in range(2):
        n = 5000
        text = [f"page {b}-{i} " + "lorem ipsum " * int(rng.integers(1, 30)) for i in range(n)]
        web.append(
            pa.table(
                {
                    "url": [f"https://site{b}.example/{i}" for i in range(n)],
                    "text": text,
                    "lang": ["en" if i % 3 else "fr" for i in range(n)],
                    "length": pa.array([len(t) for t in text], pa.int32()),
                }
            ),
            append_name=f"cc/2026-1{b}/v1",
            target_fragment_rows=2000,
        )
    version = web.version
    ids = web.read(["_ai_unique_id_"]).column(0).to_numpy()[:6000]  # all of batch 1, part of 2
    web.add_columns(
        pa.table({"_ai_unique_id_": ids, "quality": rng.random(len(ids))}), group="features"
    )
    wh.close()
    return version


def main(warehouse: str) -> None:
    before_quality = build(warehouse)
    spark = omnitable.spark_session(warehouse, master="local[2]", **{"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")

    # DataFrame API: the whole logical table, as if it were one physical table
    web = spark.read.format("omnitable").load("web")  # warehouse from spark.omnitable.warehouse
    web.printSchema()
    print("rows:", web.count())

    # Only the column files of the requested columns are opened; `quality` is NULL where the
    # feature has not been computed. Predicates prune fragments by batch and statistics.
    good = web.where("quality > 0.9 AND lang = 'en'").select("url", "quality", "_ai_append_name_")
    good.show(5, truncate=False)
    good.explain()

    # SQL through the `omnitable` catalog, with time travel and metadata columns
    spark.sql("SHOW TABLES IN omnitable").show()
    spark.sql(
        "SELECT _ai_append_name_, count(*) AS n, count(quality) AS with_quality "
        "FROM omnitable.web GROUP BY _ai_append_name_ ORDER BY 1"
    ).show()
    old = spark.sql(f"SELECT * FROM omnitable.web VERSION AS OF {before_quality}")
    print("columns before the feature existed:", old.columns)
    spark.sql("SELECT _ai_fragment_, _ai_row_offset_, url FROM omnitable.web LIMIT 3").show(
        truncate=False
    )

    # One batch only, by option (or with a predicate on _ai_append_name_)
    print(
        "batch cc/2026-11/v1:",
        spark.read.format("omnitable").option("batches", "cc/2026-11/v1").load("web").count(),
    )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-spark-"))
