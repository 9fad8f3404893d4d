"""Refreshing hot column-group views (docs/governance.md "Hot column-group views").

:class:`ViewsJob` follows the maintenance contract (governance/job.py), with Spark and Delta Lake:

- **Prepare** reads the head of the branch (the files of the views' columns only), computes each
  batch's fingerprint (catalog/views.py) and, per view, the batches to write (new or changed
  fingerprint) and to drop (no longer in the snapshot). A view whose Delta table is not at the
  version its record names (a refresh that crashed or lost a race after its Delta commit) is
  rewritten whole. Views already fresh are left out.
- **Execute** writes each view's Delta table in ONE Delta commit: the rows of the batches to
  write, read through the ``omnitable`` source at the plan's version, replace the partitions
  (``_view_batch_``) of those batches and of the dropped ones (``replaceWhere``); each batch's
  rows go to one task (files of at most ``VIEW_FILE_ROWS`` rows), sorted by the view's first
  declared column. The catalog is not touched: readers keep reading the recorded Delta version.
  The new version's data files (relative paths, sizes) and schema are noted for the record
  (:func:`_data_files`).
- **Commit** records, per view and in one catalog transaction under the table lock, the new
  Delta version, its data files and schema, and the fingerprints, after checking that nobody
  changed the view's record since Prepare and that the Delta commit sits directly on the
  recorded version (:class:`~omnitable.exceptions.CommitConflict` otherwise: the next attempt
  rewrites it whole).

A crash between the Delta commit and the record leaves the record naming the old Delta version
and the old fingerprints: the view is stale for the new data, never wrongly fresh.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from omnitable._failpoints import failpoint
from omnitable.catalog.references import VIEWS_DIR
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.catalog.views import (
    BATCH_COLUMN,
    ViewRecord,
    fingerprints,
    note_records_written,
    read_views,
    records_written,
    view_columns,
    write_views,
)
from omnitable.context import TableContext
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.format.access import co_read_sets, read_access
from omnitable.governance.job import Executed, MaintenancePlan, MaintenanceResult
from omnitable.spark.scoped_conf import session_settings
from omnitable.vocabulary.lru import Lru
from omnitable.vocabulary.names import APPEND_NAME, MAIN, ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType


VIEW_FILE_ROWS = 1_000_000  # rows per data file of a view's Delta table, at most
VIEW_ROW_GROUP_ROWS = 8_192  # rows per Parquet row group of those files, at most


@dataclass(frozen=True)
class _Written:
    """One view's Delta commit: its version, the version it was written on top of, and the new
    version's data files and schema when they can be read as plain Parquet (:func:`_data_files`)."""

    view: str
    delta_version: int
    parent_version: int | None
    files: tuple[tuple[str, int], ...] | None = None
    schema: str | None = None


class ViewsJob:
    """Refresh the declared views (``views``: only these names; None: all) with ``spark`` (None:
    the active session or a new local one).

    ``auto``: first declare views for the column sets the access log shows scans of this branch
    reading together at least ``min_scans`` times in the last ``since_s`` seconds (most scanned
    first, at most ``max_views`` per run, sets of up to ``max_columns`` columns, none a declared
    view already covers), named ``hot_<hash of the columns>``; they are declared by this job's
    commit, with their first refresh."""

    name = "views"

    def __init__(
        self,
        *,
        views: list[str] | None = None,
        spark: SparkSession | None = None,
        auto: bool = False,
        min_scans: int = 10,
        since_s: float = 7 * 86_400.0,
        max_views: int = 4,
        max_columns: int = 64,
    ) -> None:
        if isinstance(views, str):
            views = [views]
        for what, value in (("min_scans", min_scans), ("max_views", max_views),
                            ("max_columns", max_columns)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"views: {what} must be a positive integer, got {value!r}")
        if isinstance(since_s, bool) or not isinstance(since_s, (int, float)) or since_s <= 0:
            raise ValidationError(f"views: since_s must be a positive number, got {since_s!r}")
        if views is not None and auto:
            raise ValidationError("views: give either views (refresh these) or auto, not both")
        self.views = None if views is None else tuple(views)
        self.spark = spark
        self.auto = bool(auto)
        self.min_scans, self.since_s = min_scans, float(since_s)
        self.max_views, self.max_columns = max_views, max_columns

    def prepare(self, ctx: TableContext) -> MaintenancePlan:
        base = ctx.head_version()
        with ctx.catalog.store.read() as conn:
            records = read_views(conn, ctx.record.table_id)
        if self.views is not None:
            unknown = sorted(set(self.views) - set(records))
            if unknown:
                raise ValidationError(
                    f"Cannot refresh view(s) {', '.join(unknown)} of table '{ctx.name}': not "
                    f"declared; declared views: {', '.join(sorted(records)) or 'none'}"
                )
            records = {n: records[n] for n in self.views}
        declared = self._suggest(ctx, records) if self.auto else {}
        records = {**records, **declared}
        if not records:
            return MaintenancePlan(self.name, ctx.name, ctx.branch, base, (), {"views": 0})
        names = frozenset(c for r in records.values() for c in r.columns)
        snap = ctx.snapshot(version=base, scope=SnapshotScope(columns=names, stats=False))
        known = {c.name: c.column_id for c in snap.columns}
        batch_names = {b.batch_id: b.name for b in snap.batches}
        actions: list[Mapping[str, Any]] = []
        broken: list[str] = []
        for rec in sorted(records.values(), key=lambda r: r.name):
            if any(known.get(c) != i for c, i in rec.column_ids.items()):
                broken.append(rec.name)  # a column was dropped or renamed: drop the view
                continue
            fps = fingerprints(snap, set(rec.column_ids.values()))
            action = _action(ctx, rec, fps, batch_names)
            if action is not None:
                actions.append({**action, "declare": rec.name in declared})
        summary = {
            "views": len(actions),
            "declared": sorted(declared),
            "batches_written": sum(len(a["write"]) for a in actions),
            "batches_dropped": sum(len(a["drop"]) for a in actions),
            "broken": broken,
        }
        return MaintenancePlan(self.name, ctx.name, ctx.branch, base, tuple(actions), summary)

    def execute(self, ctx: TableContext, plan: MaintenancePlan) -> Executed:
        from omnitable.spark.session import active_or_new_session, require_delta

        spark = active_or_new_session(self.spark, ctx)
        require_delta(spark)
        written = [_write_view(spark, ctx, plan.base_version, a) for a in plan.actions]
        return Executed(payload=written)

    def commit(
        self, ctx: TableContext, plan: MaintenancePlan, executed: Executed
    ) -> MaintenanceResult:
        written = {w.view: w for w in executed.payload}
        failpoint("views.before_record")
        store = ctx.catalog.store
        with store.write() as conn:
            store.lock_table(conn, ctx.record.table_id)
            records = read_views(conn, ctx.record.table_id)
            for a in plan.actions:
                name = str(a["view"])
                rec, w = records.get(name), written[name]
                if a.get("declare"):
                    if rec is not None:
                        raise CommitConflict(f"View '{name}' was declared meanwhile")
                    rec = ViewRecord.from_doc(name, dict(a["record"]))
                elif rec is None or rec.to_doc() != a["record"]:
                    raise CommitConflict(f"View '{name}' changed while it was being refreshed")
                if w.parent_version != rec.delta_version and not a["full"]:
                    raise CommitConflict(
                        f"View '{name}': its Delta table moved past version {rec.delta_version} "
                        "outside a recorded refresh; it is rewritten whole next time"
                    )
                records[name] = rec.refreshed(
                    w.delta_version, dict(a["fingerprints"]), plan.base_version, ctx.branch,
                    w.files, w.schema,
                )  # fmt: skip
            write_views(conn, ctx.record.table_id, records)
        note_records_written()  # committed: records read before are stale
        summary = dict(plan.summary)
        summary["delta_versions"] = {w.view: w.delta_version for w in written.values()}
        return MaintenanceResult(self.name, "committed", None, plan, summary)

    def _suggest(self, ctx: TableContext, records: dict[str, ViewRecord]) -> dict[str, ViewRecord]:
        """Views to declare from the access log (class docstring), not yet recorded."""
        since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=self.since_s)
        sets = co_read_sets(read_access(ctx.location, since=since, branch=ctx.branch))
        snap = ctx.snapshot(with_files=False, scope=SnapshotScope(fragments=False, files=False))
        names = {c.column_id: c.name for c in snap.columns}
        covered = [set(r.column_ids.values()) for r in records.values()]
        out: dict[str, ViewRecord] = {}
        for ids, scans in sorted(sets.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(out) == self.max_views or scans < self.min_scans:
                break
            wanted = set(ids)
            if not wanted <= set(names) or len(ids) > self.max_columns:
                continue  # a dropped column, or too wide for a hot view
            if any(wanted <= have for have in covered):
                continue
            cols = [names[i] for i in sorted(ids)]
            name = "hot_" + hashlib.sha256(",".join(cols).encode()).hexdigest()[:12]
            view_names, view_ids = view_columns(snap, name, cols)
            out[name] = ViewRecord(
                name, view_names, view_ids, f"{VIEWS_DIR}/{name}-{uuid.uuid4().hex[:12]}"
            )
            covered.append(set(view_ids.values()))
        return out


def _action(
    ctx: TableContext, rec: ViewRecord, fps: dict[str, str], batch_names: dict[str, str]
) -> dict[str, Any] | None:
    """What refreshing ``rec`` to fingerprints ``fps`` takes (None: it is fresh)."""
    head = _delta_head(ctx, rec)
    full = rec.delta_version is None or head != rec.delta_version
    if full:
        write = sorted(fps)
        drop: list[str] = []
    else:
        write = sorted(b for b, fp in fps.items() if rec.batches.get(b) != fp)
        drop = sorted(set(rec.batches) - set(fps))
        if not write and not drop:
            return None
    return {
        "view": rec.name,
        "full": full,
        "write": write,
        "drop": drop,
        "names": {b: batch_names[b] for b in write},
        "fingerprints": fps,
        "record": rec.to_doc(),
    }


def _delta_head(ctx: TableContext, rec: ViewRecord) -> int | None:
    """The newest version of the view's Delta table (from its log directory; None: no table)."""
    import pyarrow.fs as pafs

    log_dir = ctx.location.child_path(f"{rec.path}/_delta_log")
    selector = pafs.FileSelector(log_dir, allow_not_found=True)
    versions = [
        int(info.base_name.split(".")[0])
        for info in ctx.location.fs.get_file_info(selector)
        if info.base_name.endswith(".json") and info.base_name.split(".")[0].isdigit()
    ]
    return max(versions) if versions else None


def _write_view(
    spark: SparkSession, ctx: TableContext, version: int, action: Mapping[str, Any]
) -> _Written:
    """One Delta commit replacing the view's partitions of the written and dropped batches."""
    from pyspark.sql import functions as F

    from omnitable.spark.session import warehouse_string

    record = ViewRecord.from_doc(str(action["view"]), dict(action["record"]))
    uri = ctx.location.child_uri(record.path)
    write, names = list(action["write"]), dict(action["names"])
    columns = [F.col(c) for c in record.columns] + [F.col(APPEND_NAME)]
    reader = spark.read.format("omnitable").option("warehouse", warehouse_string(ctx))
    reader = reader.option("versionAsOf", str(version))
    if ctx.branch != MAIN:
        reader = reader.option("branch", ctx.branch)
    if write:
        df = reader.option("batches", ",".join(sorted(set(names.values())))).load(ctx.name)
        by_name = F.create_map(*[F.lit(x) for b in write for x in (names[b], b)])
        df = df.select(*columns, by_name[F.col(APPEND_NAME)].alias(BATCH_COLUMN))
        # layout: one task per batch partition (files of at most VIEW_FILE_ROWS rows, not one per
        # fragment), rows clustered by the first declared column so that the files' statistics
        # let Delta skip files (and Parquet pages) under a filter on it
        first = _sort_column(df.schema, record.columns)
        df = df.repartition(F.col(BATCH_COLUMN)).sortWithinPartitions(BATCH_COLUMN, first)
    else:  # only drops: an empty frame of the view's schema
        df = reader.load(ctx.name).select(*columns, F.lit("").alias(BATCH_COLUMN)).limit(0)
    token = f"omnitable-view-{uuid.uuid4().hex}"
    writer = df.write.format("delta").mode("overwrite").option("userMetadata", token)
    writer = writer.option("maxRecordsPerFile", str(VIEW_FILE_ROWS))
    if action["full"]:
        writer = writer.option("overwriteSchema", "true").partitionBy(BATCH_COLUMN)
    else:
        ids = ", ".join(f"'{b}'" for b in sorted(set(write) | set(action["drop"])))
        writer = writer.option("replaceWhere", f"{BATCH_COLUMN} IN ({ids})")
    with session_settings(spark, _VIEW_WRITE_SETTINGS):
        writer.save(uri)
    done = _committed(spark, uri, record.name, token)
    files, schema = _data_files(spark, ctx, record, uri, done.delta_version)
    return replace(done, files=files, schema=schema)


def _sort_column(schema: StructType, columns: tuple[str, ...]) -> str:
    """The column a view's rows are sorted by within a batch: its first declared column of a
    type whose values Parquet's statistics bound (a number, string, binary, boolean, date or
    timestamp: not a list, struct or map), else ``_ai_unique_id_``."""
    types = {f.name: f.dataType for f in schema.fields}
    return next((c for c in columns if c != ROW_ID and _bounded(types[c])), ROW_ID)


def _bounded(t: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    return not isinstance(t, ArrayType | MapType | StructType)


# how a view's files are written: row groups of at most VIEW_ROW_GROUP_ROWS rows (a filter on
# the sorted first column skips the others, for readers without Parquet's page index too);
# timestamps as Parquet's TIMESTAMP_MICROS (the table's type) rather than INT96, and dates and
# timestamps in the proleptic Gregorian calendar whatever the session's rebase mode (LEGACY
# would shift old values in a way only Spark undoes), so that Table.read can answer from them
# (format/view_reader.py)
_VIEW_WRITE_SETTINGS = {
    "parquet.block.row.count.limit": str(VIEW_ROW_GROUP_ROWS),
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
}

# table properties under which a Delta version's data files are not plain Parquet of its rows
_NOT_PLAIN = {"delta.columnMapping.mode": "none", "delta.enableDeletionVectors": "false"}


def _data_files(
    spark: SparkSession, ctx: TableContext, record: ViewRecord, uri: str, version: int
) -> tuple[tuple[tuple[str, int], ...] | None, str | None]:
    """The data files of the view's Delta ``version`` (paths relative to the view directory,
    sizes) and its schema without ``_view_batch_`` (Spark JSON), which the JVM rule reads as
    plain Parquet; ``(None, None)`` when they are not plain Parquet of the version's rows (column
    mapping or deletion vectors enabled) or a file is not where its path says."""
    import pyarrow.fs as pafs
    from pyspark.sql.types import StructType

    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").select("properties").first()
    if detail is None:
        return None, None
    props = {str(k): str(v).lower() for k, v in dict(detail["properties"] or {}).items()}
    if any(props.get(k, ok) != ok for k, ok in _NOT_PLAIN.items()):
        return None, None
    df = spark.read.format("delta").option("versionAsOf", str(version)).load(uri)
    marker = f"/{BATCH_COLUMN}="
    relative = []
    for path in df.inputFiles():
        at = path.rfind(marker)
        if at < 0:
            return None, None
        relative.append(unquote(path[at + 1 :]))
    infos = ctx.location.fs.get_file_info(
        [ctx.location.child_path(f"{record.path}/{p}") for p in relative]
    )
    if any(i.type != pafs.FileType.File for i in infos):
        return None, None
    files = tuple(sorted((p, int(i.size)) for p, i in zip(relative, infos, strict=True)))
    schema = StructType([f for f in df.schema.fields if f.name != BATCH_COLUMN])
    return files, schema.json()


def _committed(spark: SparkSession, uri: str, view: str, token: str) -> _Written:
    """The Delta version the write tagged ``token`` made, and the one before it."""
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 20").select(
        "version", "userMetadata"
    ).collect()  # fmt: skip
    mine = [int(r["version"]) for r in rows if r["userMetadata"] == token]
    if not mine:
        raise CommitConflict(f"View '{view}': its Delta commit is not in the table's history")
    version = mine[0]
    return _Written(view, version, version - 1 if version > 0 else None)


_VIEW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def declare_view(ctx: TableContext, name: str, columns: list[str]) -> ViewRecord:
    """Record view ``name`` of ``columns`` (checked against the head of the branch); it holds no
    rows until the ``views`` job refreshes it.

    Raises:
        ValidationError: an invalid or taken name, no columns, or an unknown column.
    """
    if not isinstance(name, str) or not _VIEW_NAME.fullmatch(name):
        raise ValidationError(
            f"Cannot create view {name!r}: a view name is 1-64 letters, digits or underscores, "
            "not starting with a digit"
        )
    snap = ctx.snapshot(with_files=False, scope=SnapshotScope(fragments=False, files=False))
    names, ids = view_columns(snap, name, list(columns))
    rec = ViewRecord(name, names, ids, f"{VIEWS_DIR}/{name}-{uuid.uuid4().hex[:12]}")
    store = ctx.catalog.store
    with store.write() as conn:
        store.lock_table(conn, ctx.record.table_id)
        records = read_views(conn, ctx.record.table_id)
        if name in records:
            raise ValidationError(
                f"Cannot create view '{name}' of table '{ctx.name}': it exists; drop it first"
            )
        records[name] = rec
        write_views(conn, ctx.record.table_id, records)
    note_records_written()
    return rec


def drop_view(ctx: TableContext, name: str) -> None:
    """Forget view ``name``, then delete its Delta table.

    Raises:
        ValidationError: no such view.
    """
    store = ctx.catalog.store
    with store.write() as conn:
        store.lock_table(conn, ctx.record.table_id)
        records = read_views(conn, ctx.record.table_id)
        rec = records.pop(name, None)
        if rec is None:
            raise ValidationError(
                f"Cannot drop view '{name}' of table '{ctx.name}': no such view; declared "
                f"views: {', '.join(sorted(records)) or 'none'}"
            )
        write_views(conn, ctx.record.table_id, records)
    note_records_written()
    with contextlib.suppress(OSError):
        ctx.location.fs.delete_dir(ctx.location.child_path(rec.path))


def list_views(ctx: TableContext, max_age_s: float = 0.0) -> list[ViewRecord]:
    """The declared views, by name; ``max_age_s`` > 0: possibly as read from the catalog up to
    that long ago by this process (unless it wrote view records since), which saves a catalog
    round trip per read."""
    key = (warehouse_key(ctx), ctx.record.table_id)
    now, written = time.monotonic(), records_written()
    if max_age_s > 0:
        _, hit = _LISTED.get(key)
        if hit is not None and hit[1] == written and now - hit[0] < max_age_s:
            return hit[2]
    with ctx.catalog.store.read() as conn:
        views = [v for _, v in sorted(read_views(conn, ctx.record.table_id).items())]
    if records_written() == written:  # else a write of this process may have raced the read
        _LISTED.put(key, (now, written, views))
    return views


def warehouse_key(ctx: TableContext) -> str:
    """Which warehouse ``ctx``'s table lives in, for caches of this process: its catalog (no
    secret) and data location (copies of a warehouse share table ids)."""
    return f"{ctx.catalog.address.redacted()}|{ctx.location.uri}"


_LISTED: Lru[tuple[float, int, list[ViewRecord]]] = Lru(256)  # by (warehouse, table id)
