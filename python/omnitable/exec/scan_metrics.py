"""Scan metrics as Spark reports them, through the jar's ``ScanMetricsListener``, and SQL
metrics summed over an executed plan.

The listener aggregates successful tasks' input metrics and the omnitable scans' own metrics
(bytes of column chunks read, files opened, fragments read, corrupt fragments skipped) per job
tag. The backfill runner tags each job and reads its bucket after the job.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class ScanMetrics:
    """Access to the listener of one SparkSession (installed on first use, idempotently)."""

    def __init__(self, spark: SparkSession) -> None:
        jvm: Any = spark.sparkContext._jvm
        self._listener = jvm.io.omnitable.spark.metrics.ScanMetricsListener
        self._listener.install(spark.sparkContext._jsc.sc())

    def snapshot(self) -> dict[str, Any]:
        """Everything counted since the last reset (after draining Spark's listener bus)."""
        return dict(json.loads(self._listener.snapshot()))

    def for_tag(self, tag: str) -> dict[str, Any]:
        """Metrics of the jobs that carried ``tag`` (empty when none ran)."""
        return dict(self.snapshot().get("byJobTag", {}).get(tag, {}))

    def reset(self) -> None:
        self._listener.reset()


def plan_metric_total(df: DataFrame, metric: str) -> int:
    """Run ``df`` (collect) and return the sum of SQL metric ``metric`` over its executed plan.

    For example ``pythonDataSent``: the bytes Spark sent to Python workers. An adaptive plan
    is read in its final form. Nodes without the metric count 0.
    """
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    total, stack = 0, [plan]
    while stack:
        node = stack.pop()
        value = node.metrics().get(metric)
        if value.isDefined():
            total += int(value.get().value())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return total
