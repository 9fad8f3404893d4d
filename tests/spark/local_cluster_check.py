"""Read a table with deleted rows on Spark's local-cluster master (separate executor JVMs),
planned on the driver and on the executors, and compare with the Python reader. Run by test_spark_local_cluster.py in its own process (one SparkContext per
process). Usage: local_cluster_check.py WAREHOUSE_DIR"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import omnitable
from omnitable import ROW_ID


def main() -> None:
    wh = omnitable.connect(sys.argv[1])
    t = wh.create_table(
        "lc", {"a": "double", "s": "string", "tags": "array<string>"}, groups={"g": ["a"]}
    )
    for b in range(3):
        n = 3000
        t.append(
            pa.table(
                {
                    "a": np.arange(n) * 0.5 + b,
                    "s": [f"{b}-{i}" for i in range(n)],
                    "tags": [[str(i % 7)] * (i % 3) for i in range(n)],
                }
            ),
            f"b{b}",
            row_group_size=256 + b * 100,
            target_fragment_rows=1000,
        )
    # deletion vectors travel with the partitions and are decoded in the executor JVMs
    deleted = t.delete(pa.compute.ends_with(pa.compute.field("s"), "7"))
    assert deleted.rows == 900, deleted
    import pyspark

    os.environ["SPARK_HOME"] = str(Path(str(pyspark.__file__)).parent)
    conf: dict[str, Any] = {"spark.ui.enabled": "false", "spark.executor.memory": "768m"}
    spark = omnitable.spark_session(wh, master="local-cluster[2,1,1024]", **conf)
    try:
        sc = spark.sparkContext
        df = t.to_spark(spark).where("a >= 100").select(ROW_ID, "a", "s", "tags")
        got = sorted(df.toArrow().to_pylist(), key=lambda r: r[ROW_ID])
        want = sorted(
            t.read([ROW_ID, "a", "s", "tags"]).filter(pa.compute.field("a") >= 100).to_pylist(),
            key=lambda r: r[ROW_ID],
        )
        # local-cluster runs no tasks in the driver: every scan task ran in an executor JVM
        executors = int(sc._jsc.sc().getExecutorIds().size())
        assert got == want, "local-cluster read differs from Table.read()"
        assert len(got) > 0
        # a scan planned on the executors: each task lists its batches' fragments from the
        # catalog in its own JVM (the SQLite file by its absolute path)
        spark.conf.set("spark.omnitable.read.executor_planning_min_fragments", "0")
        spark.conf.set("spark.sql.files.maxPartitionBytes", "64k")
        sliced = t.to_spark(spark).select(ROW_ID, "a", "s", "tags")
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            sliced.explain()
        assert "listed and pruned by the executors" in plan.getvalue(), plan.getvalue()
        in_order = t.read([ROW_ID, "a", "s", "tags"]).to_pylist()
        assert sliced.toArrow().to_pylist() == in_order, "executor-planned read differs"
        slices = sliced.rdd.getNumPartitions()
        print(f"OK rows={len(got)} executors={executors} partitions={df.rdd.getNumPartitions()} "
              f"slices={slices} sliced_rows={len(in_order)}")  # fmt: skip
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
