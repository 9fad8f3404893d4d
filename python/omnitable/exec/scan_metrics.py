"""Scan metrics as Spark reports them, through the jar's ``ScanMetricsListener``, and SQL
metrics summed over the tasks of a query.

The listener aggregates successful tasks' input and spill metrics, the omnitable scans' own
metrics (bytes of column chunks read, files opened, fragments read, corrupt fragments skipped)
and the tasks' SQL metric updates per job tag. The backfill runner tags each job and reads its bucket after the job.
Python reaches the listener through SQL only (``SELECT metrics FROM omnitable_scan_metrics()``,
a table function of the extension), so the same code runs on a classic and a Connect session.
"""

from __future__ import annotations

import json
import uuid
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FUNCTION = "omnitable_scan_metrics"
_INSTALLED: weakref.WeakSet[SparkSession] = weakref.WeakSet()  # sessions whose listener is on

# Display names of the SQL metrics callers ask for by their plan key (SparkPlan.metrics).
SQL_METRIC_NAMES = {
    "pythonDataSent": "data sent to Python workers",
    "pythonDataReceived": "data returned from Python workers",
    "numOutputRows": "number of output rows",
}


class ScanMetrics:
    """Access to the listener of one SparkSession (installed on first use, idempotently)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        if spark not in _INSTALLED:  # one query per session, not per job (a backfill chunk)
            self.snapshot()  # installs the listener: counting starts now
            _INSTALLED.add(spark)

    def _call(self, *args: str) -> dict[str, Any]:
        quoted = ", ".join("'" + a + "'" for a in args)
        row = self._spark.sql(f"SELECT metrics FROM {FUNCTION}({quoted})").collect()[0]
        return dict(json.loads(row[0]))

    def snapshot(self) -> dict[str, Any]:
        """Everything counted since the last reset (after draining Spark's listener bus)."""
        return self._call()

    def for_tag(self, tag: str) -> dict[str, Any]:
        """Metrics of the jobs that carried ``tag`` (empty when none ran).

        ``tag`` is a tag of the session (``spark.addTag``) or of the SparkContext: Spark hands a
        session tag to jobs with a prefix of its own (``spark-session-<uuid>-thread-<uuid>-<tag>``
        on a classic session, ``SparkConnect_..._Tag_<tag>`` on Connect), so a bucket counts
        when its name is ``tag`` or ends with ``-<tag>`` or ``_<tag>``; use unique tags.
        """
        buckets = self.snapshot().get("byJobTag", {})
        found = [v for k, v in buckets.items() if k == tag or k.endswith(("-" + tag, "_" + tag))]
        return _sum_buckets(found) if len(found) > 1 else dict(found[0]) if found else {}

    def reset(self) -> None:
        self._call("reset")


def _sum_buckets(buckets: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals of several buckets (a tag seen under more than one prefix)."""
    out: dict[str, Any] = {}
    for bucket in buckets:
        for key, value in bucket.items():
            if isinstance(value, list):
                out[key] = out.get(key, []) + value
            elif isinstance(value, dict):
                merged = dict(out.get(key, {}))
                for k, v in value.items():
                    merged[k] = merged.get(k, 0) + v
                out[key] = merged
            else:
                out[key] = out.get(key, 0) + value
    return out


def plan_metric_total(df: DataFrame, metric: str) -> int:
    """Run ``df`` (collect) and return the sum of SQL metric ``metric`` over its tasks.

    For example ``pythonDataSent``: the bytes Spark sent to Python workers. ``metric`` is a plan
    metric key of :data:`SQL_METRIC_NAMES` or a metric's display name. The job is tagged and
    its tasks' SQL metric updates summed by the listener (SQL only: classic and Connect alike).
    0 when no task reported the metric.
    """
    spark = df.sparkSession
    metrics = ScanMetrics(spark)
    tag = f"omnitable-plan-metric-{uuid.uuid4().hex}"
    spark.addTag(tag)
    try:
        df.collect()
    finally:
        spark.removeTag(tag)
    sums = metrics.for_tag(tag).get("sqlMetrics", {})
    return int(sums.get(SQL_METRIC_NAMES.get(metric, metric), 0))
