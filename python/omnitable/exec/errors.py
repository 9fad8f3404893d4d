"""Record-level error tables: one Delta table per logical table, under ``<table>/errors``.

A backfill writes one row per record a feature could not compute (NULL outputs in the data)
before it commits the column files those NULLs live in. Every row names the output file
(``file_id``); a row is **visible exactly when that file is visible** in the table's snapshot, so
error rows appear atomically with their run's files, vanish with a failed commit, and are
resolved when a retry (or recomputation) replaces the file. An upsert records the input rows it
rejected (kind ``upsert``) with no file: they never entered the table and are always visible.
See docs/errors.md.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from omnitable.vocabulary.names import ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from omnitable.catalog.snapshot import Snapshot
    from omnitable.context import TableContext

log = logging.getLogger(__name__)

ERROR_SCHEMA = (
    f"{ROW_ID} BIGINT, batch STRING, fragment_id STRING, row_offset BIGINT, file_id STRING, "
    "feature STRING, feature_version STRING, kind STRING, exception_type STRING, message STRING, "
    "traceback STRING, input_digest STRING, run_id STRING, recorded_at TIMESTAMP"
)
ERROR_COLUMNS = [part.strip().split(" ")[0] for part in ERROR_SCHEMA.split(",")]


def error_location(ctx: TableContext) -> str:
    """URI of the table's error table (a Delta table)."""
    return ctx.location.join("errors").uri


def append_errors(spark: SparkSession, ctx: TableContext, rows: list[dict[str, Any]]) -> None:
    """Append error rows (dicts with ERROR_COLUMNS) to the table's Delta error table."""
    if not rows:
        return
    import pandas as pd

    from omnitable.spark.session import require_delta

    require_delta(spark)
    location = error_location(ctx)
    ctx.catalog.register_error_table(ctx.record, location)
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    frame = pd.DataFrame([{c: r.get(c) for c in ERROR_COLUMNS} for r in rows])
    frame["recorded_at"] = now
    df = spark.createDataFrame(frame, ERROR_SCHEMA)
    df.write.format("delta").mode("append").save(location)


def record_rejected_input(
    spark: SparkSession | None, ctx: TableContext, rows: list[dict[str, Any]]
) -> str | None:
    """Append an operation's rejected input rows (an upsert's) to the error table, with
    ``spark``, the active session or a new local one. The operation has committed already, so a
    failure is not raised: it is logged as a warning and its reason returned (None: recorded)."""
    from omnitable.spark.session import active_or_new_session

    try:
        append_errors(active_or_new_session(spark, ctx), ctx, rows)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        log.warning(
            "%d rejected row(s) of table '%s' were not recorded in its error table (%s); "
            "they are in the result's `rejected`",
            len(rows), ctx.name, reason,
        )  # fmt: skip
        return reason
    return None


def read_errors(
    spark: SparkSession,
    ctx: TableContext,
    snap: Snapshot,
    *,
    feature: str | None = None,
    run: str | None = None,
    include_resolved: bool = False,
) -> DataFrame:
    """Error rows of ``table`` as a Spark DataFrame (visible rows only, unless asked)."""
    from pyspark.sql import functions as F

    from omnitable.spark.session import require_delta

    require_delta(spark)
    location = error_location(ctx)
    if not _error_table_exists(ctx):
        return spark.createDataFrame([], ERROR_SCHEMA)
    df = spark.read.format("delta").load(location)
    if feature is not None:
        df = df.where(F.col("feature") == feature)
    if run is not None:
        df = df.where(F.col("run_id") == run)
    if include_resolved:
        return df
    inputs = df.where(F.col("file_id").isNull())  # rejected input rows (upserts): no file
    visible = _visible_file_ids(snap)
    if not visible:
        return inputs.select(*ERROR_COLUMNS)
    ids = spark.createDataFrame([(i,) for i in visible], "file_id STRING")
    outputs = df.join(F.broadcast(ids), "file_id", "left_semi")
    return outputs.select(*ERROR_COLUMNS).unionByName(inputs.select(*ERROR_COLUMNS))


def error_offsets(
    spark: SparkSession, ctx: TableContext, file_ids: Iterable[str]
) -> dict[str, list[int]]:
    """file_id -> sorted row offsets of its error rows (what a retry recomputes)."""
    from pyspark.sql import functions as F

    wanted = sorted(set(file_ids))
    location = error_location(ctx)
    if not wanted or not _error_table_exists(ctx):
        return {}
    rows = (
        spark.read.format("delta")
        .load(location)
        .where(F.col("file_id").isin(wanted))
        .groupBy("file_id")
        .agg(F.sort_array(F.collect_set("row_offset")).alias("offsets"))
        .collect()
    )
    return {r.file_id: [int(x) for x in r.offsets] for r in rows}


def _visible_file_ids(snap: Snapshot) -> list[str]:
    live = {f.fragment_id for f in snap.fragments}
    return [
        f.file_id for frag, files in snap.files_by_fragment.items() if frag in live for f in files
    ]


def _error_table_exists(ctx: TableContext) -> bool:
    """Whether the error table has a commit: a file in its ``_delta_log``, looked up through the
    warehouse's filesystem (no Spark call: the same on a classic and a Connect session)."""
    import pyarrow.fs as pafs

    log_dir = ctx.location.join("errors", "_delta_log")
    selector = pafs.FileSelector(log_dir.path, allow_not_found=True)
    return any(
        info.type == pafs.FileType.File and info.base_name.endswith((".json", ".parquet"))
        for info in log_dir.fs.get_file_info(selector)
    )
