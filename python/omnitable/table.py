"""``Table``: one logical wide table (thin: delegates to catalog, format and ingest)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.records import APPEND_NAME, MAIN, ROW_ID, CommitRecord, TableRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import (
    AlreadyExistsError,
    CommitOutcomeUnknown,
    ValidationError,
)
from omnitable.format.fs import Location, delete_quietly
from omnitable.format.reader import FragmentReader, ReadStats
from omnitable.format.writer import WriteOptions, new_id, write_fragment
from omnitable.ingest import columns as add_cols
from omnitable.ingest.conform import Conformer
from omnitable.ingest.ids import IdClaim, check_existing, commit_append
from omnitable.ingest.local import append_request, duplicate_ids, ingest_batches
from omnitable.ingest.sources import is_spark_dataframe, record_batches
from omnitable.settings import READ_LATE_MATERIALIZATION_MAX_SELECTIVITY, Sources

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from omnitable.features.definition import Feature
    from omnitable.features.planner import Plan
    from omnitable.features.status import LineageRecord, StatusGrid
    from omnitable.warehouse import Warehouse

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class BatchInfo:
    """A batch (one ``_ai_append_name_``) of a table."""

    name: str
    rows: int
    fragments: int
    created: str


@dataclass(frozen=True)
class ScanResult:
    table: pa.Table
    stats: ReadStats


class Table:
    """A logical wide table. Obtain it from :meth:`Warehouse.table` or ``create_table``."""

    def __init__(self, warehouse: Warehouse, record: TableRecord) -> None:
        self.warehouse = warehouse
        self.record = record

    # -- identity and metadata ------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def location(self) -> Location:
        return self.warehouse.root.join(self.record.location)

    @property
    def _catalog(self) -> Any:
        return self.warehouse.catalog

    def snapshot(
        self,
        *,
        version: int | None = None,
        branch: str | None = None,
        tag: str | None = None,
        with_files: bool = True,
    ) -> Snapshot:
        """The catalog state of one version (default: head of ``main``)."""
        return self._catalog.snapshot(
            self.record, branch=branch, tag=tag, version=version, with_files=with_files
        )

    @property
    def schema(self) -> pa.Schema:
        """Logical schema at the head of ``main`` (system columns first)."""
        return self.snapshot(with_files=False).arrow_schema()

    @property
    def version(self) -> int:
        """Current version (head of ``main``)."""
        return int(self._catalog.head_version(self.record))

    def batches(self, version: int | None = None) -> list[BatchInfo]:
        """Batches with their row and fragment counts, oldest first."""
        snap = self.snapshot(version=version, with_files=False)
        rows: dict[str, int] = {}
        frags: dict[str, int] = {}
        for f in snap.fragments:
            rows[f.batch_id] = rows.get(f.batch_id, 0) + f.row_count
            frags[f.batch_id] = frags.get(f.batch_id, 0) + 1
        return [
            BatchInfo(b.name, rows.get(b.batch_id, 0), frags.get(b.batch_id, 0), b.created_at)
            for b in snap.batches
        ]

    def history(self) -> list[CommitRecord]:
        """Commits of ``main``, newest first: version, op, summary, time."""
        return list(self._catalog.history(self.record))

    def runs(self) -> list[dict[str, Any]]:
        """This table's ingest and backfill runs, newest first: ``run_id``, ``kind``, ``status``
        (``running``, ``succeeded``, ``failed``, ``aborted``, or ``abandoned`` for a run still
        marked running whose driver process is gone), ``plan``, ``metrics``, ``message``,
        ``started_at``, ``finished_at``, ``host``, ``pid``."""
        return self._catalog.list_runs(self.record)

    def count(self, version: int | None = None) -> int:
        return sum(f.row_count for f in self.snapshot(version=version, with_files=False).fragments)

    def __repr__(self) -> str:
        return f"Table({self.name!r}, warehouse={self.warehouse.address.display()!r})"

    # -- reading --------------------------------------------------------------------------

    def read(
        self,
        columns: list[str] | None = None,
        where: pc.Expression | None = None,
        version: int | None = None,
        batches: list[str] | None = None,
        *,
        branch: str | None = None,
        tag: str | None = None,
    ) -> pa.Table:
        """Read rows as a pyarrow Table (merge-on-read zip of the column files, no Spark).

        Args:
            columns: columns to return, in that order (default: all, system columns first).
            where: a pyarrow compute expression, e.g. ``pc.field("score") > 0.5``; fragments
                whose statistics rule it out are skipped.
            version: read this version instead of the head (time travel).
            batches: only rows of these append names.

        Raises:
            UnknownColumnError, NotFoundError (version, batch), ValidationError.
        """
        return self.scan(columns, where, version, batches, branch=branch, tag=tag).table

    def scan(
        self,
        columns: list[str] | None = None,
        where: pc.Expression | None = None,
        version: int | None = None,
        batches: list[str] | None = None,
        *,
        branch: str | None = None,
        tag: str | None = None,
    ) -> ScanResult:
        """Like :meth:`read`, also returning what the read touched (fragments, files, bytes)."""
        if batches is not None:
            if isinstance(batches, str):
                batches = [batches]
            batches = list(batches)
        snap = self.snapshot(version=version, branch=branch, tag=tag)
        selectivity = self._settings_sources().resolve(READ_LATE_MATERIALIZATION_MAX_SELECTIVITY)
        reader = FragmentReader(self.location, snap, selectivity)
        table, stats = reader.read(columns, where, batches)
        return ScanResult(table, stats)

    def to_pandas(self, columns: list[str] | None = None, **kwargs: Any) -> Any:
        return self.read(columns, **kwargs).to_pandas()

    def to_spark(
        self,
        spark: SparkSession | None = None,
        version: int | None = None,
        *,
        branch: str | None = None,
        tag: str | None = None,
        batches: list[str] | None = None,
    ) -> DataFrame:
        """This table as a Spark DataFrame through the ``omnitable`` data source."""
        from omnitable.spark.session import active_or_new_session, warehouse_string

        session = active_or_new_session(spark, self.warehouse)
        wh = warehouse_string(self.warehouse)
        reader = session.read.format("omnitable").option("warehouse", wh)
        if version is not None:
            reader = reader.option("versionAsOf", str(version))
        if branch is not None:
            reader = reader.option("branch", branch)
        if tag is not None:
            reader = reader.option("tag", tag)
        if batches is not None:
            reader = reader.option("batches", ",".join(batches))
        return reader.load(self.name)

    # -- writing --------------------------------------------------------------------------

    def append(
        self,
        data: Any,
        append_name: str,
        mode: Literal["error", "replace"] = "error",
        *,
        row_group_size: int | None = None,
        target_fragment_rows: int | None = None,
    ) -> int:
        """Append ``data`` as batch ``append_name``; returns the new version.

        ``data``: pandas DataFrame, pyarrow Table/RecordBatchReader, path/glob/list of Parquet or
        JSON-lines files, or a Spark DataFrame (written by Spark tasks, committed once).
        ``_ai_unique_id_`` is assigned unless supplied; supplied ids must be non-null and unique
        in the table. With ``mode="replace"`` an existing batch of that name is replaced
        atomically (its derived columns must then be back-filled again).

        Raises:
            AlreadyExistsError: the batch exists and mode is "error".
            SchemaMismatchError, UnknownColumnError, CorruptInputError, ValidationError:
                bad input; nothing is committed.
            CommitConflict: a concurrent commit created the same batch.
        """
        _check_append_name(append_name)
        if mode not in ("error", "replace"):
            raise ValidationError(f"Cannot append: mode must be 'error' or 'replace', got {mode!r}")
        options = self._write_options(row_group_size, target_fragment_rows)
        snap = self.snapshot()
        old = [b for b in snap.batches if b.name == append_name]
        if old and mode == "error":
            raise AlreadyExistsError(
                f"Cannot append batch '{append_name}' to table '{self.name}': it already exists; "
                "use mode='replace' to replace it atomically"
            )
        if is_spark_dataframe(data):
            from omnitable.ingest.spark import append_spark

            return append_spark(self, snap, data, append_name, old, options)
        return self._append_local(snap, data, append_name, old, options)

    def _append_local(
        self, snap: Snapshot, data: Any, append_name: str, old: list[Any], options: WriteOptions
    ) -> int:
        conformer = Conformer(self.name, snap.user_columns)
        group_of = {c.name: c.group_name for c in snap.columns}
        physical = {c.name: c.physical_name for c in snap.columns}
        batch_id = new_id()
        location = self.location
        run_id = self._catalog.start_run(self.record, "ingest", {"batch": append_name})
        written: list[str] = []
        try:

            def write(table: pa.Table, seq: int) -> Any:
                desc = write_fragment(
                    location, append_name, batch_id, table, group_of, physical, options, seq
                )
                written.extend(location.child_path(f.path) for f in desc.files)
                return desc

            result = ingest_batches(
                record_batches(data, conformer.target_schema()),
                conformer,
                options,
                write,
                lambda n: self._catalog.reserve_row_ids(self.record, n),
            )
            old_ids = {b.batch_id for b in old}
            claim = self._id_claim(snap, result.supplied_ids, result.fragments, old_ids)
            req = append_request(
                snap,
                batch_id,
                append_name,
                old_ids,
                result.fragments,
                result.id_range,
                run_id,
                "local",
            )
            version = commit_append(self, req, claim)
        except BaseException as exc:
            if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
                delete_quietly(location.fs, written)
            self._catalog.fail_run(run_id, exc)
            raise
        self._catalog.finish_run(run_id, "succeeded", {"rows": result.rows, "version": version})
        return version

    def _id_claim(
        self, snap: Snapshot, supplied: np.ndarray | None, fragments: list[Any], replaced: set[str]
    ) -> IdClaim:
        """The append's row ids; supplied ids are checked for duplicates and against ``snap``."""
        if supplied is None:
            return IdClaim.generated(fragments, snap.version)
        dupes = duplicate_ids(supplied)
        if dupes:
            raise ValidationError(
                f"Cannot append to table '{self.name}': duplicate {ROW_ID} values in the input, "
                f"e.g. {dupes}"
            )
        claim = IdClaim(snap.version, supplied=np.unique(supplied))
        check_existing(self, snap, claim, replaced)
        return claim

    def add_columns(self, data: Any, group: str | None = None) -> int:
        """Attach new columns to existing rows, keyed by ``_ai_unique_id_``; returns the version.

        Writes one new column file per fragment that has at least one of the given ids (no
        existing file is rewritten); rows not covered read as NULL. The new columns form a new
        column group (``group``, default derived from the first column's name).

        Raises:
            ValidationError: missing/null/duplicate/unknown ids, columns that already exist, or
                a group name that is already used. Nothing is committed.
        """
        return add_cols.add_columns(self, data, group)

    # -- features -------------------------------------------------------------------------

    def register(self, *features: Feature) -> int | None:
        """Register feature definitions (new ones, or new versions); returns the new version or
        None when nothing changed.

        Raises:
            ValidationError: unknown inputs, output clashes, cycles, changed code under an
                unchanged version, or a pandas feature that other processes cannot import.
        """
        from omnitable.features.registry import register

        return register(self, features)

    def features(self) -> list[Feature]:
        """The current version of every registered feature."""
        from omnitable.features.registry import current_features

        return list(current_features(self).values())

    def backfill(
        self,
        targets: str | list[str],
        batches: list[str] | None = None,
        *,
        retry_errors: bool = False,
    ) -> Plan:
        """Plan the minimal work bringing ``targets`` (features or output columns) up to date.

        Nothing runs until ``plan.run()``; ``plan.explain()`` shows the steps, the fused groups,
        what is reused and why, and estimated input bytes. With ``retry_errors=True``, records
        that failed a feature earlier are recomputed (only those records; after a fix and a
        version bump everything is recomputed anyway).
        """
        from omnitable.features.planner import make_plan
        from omnitable.features.registry import table_graph

        if isinstance(targets, str):
            targets = [targets]
        if isinstance(batches, str):
            batches = [batches]
        graph = table_graph(self)
        counts = self._catalog.error_counts(self.record) if retry_errors else None
        plan = make_plan(self, graph, self.snapshot(), list(targets), batches, retry_errors, counts)
        plan.replan = lambda: self.backfill(targets, batches, retry_errors=retry_errors)
        return plan

    def status(self, version: int | None = None) -> StatusGrid:
        """Batch x derived-column grid of done / stale / missing / partial, with the number of
        failed records per cell."""
        from omnitable.features.registry import current_features
        from omnitable.features.status import status_grid

        return status_grid(
            self,
            self.snapshot(version=version),
            current_features(self),
            self._catalog.error_counts(self.record),
        )

    def errors(
        self,
        feature: str | None = None,
        run: str | None = None,
        *,
        spark: SparkSession | None = None,
        include_resolved: bool = False,
    ) -> DataFrame:
        """Records that failed a feature, from the table's error table (a Spark DataFrame).

        Only rows whose output file is visible are returned (an error appears with its run's
        files and disappears once a retry or recomputation replaces them), unless
        ``include_resolved``.
        """
        from omnitable.exec.errors import read_errors
        from omnitable.spark.session import active_or_new_session

        session = active_or_new_session(spark, self.warehouse)
        return read_errors(
            session,
            self,
            self.snapshot(),
            feature=feature,
            run=run,
            include_resolved=include_resolved,
        )

    def errors_view(self, spark: SparkSession, name: str | None = None) -> str:
        """Register the visible error rows as a temporary view for Spark SQL; returns its name."""
        view = name or f"{self.name}_errors"
        self.errors(spark=spark).createOrReplaceTempView(view)
        return view

    def lineage(self, column: str, batch: str | None = None) -> list[LineageRecord]:
        """Where the current data of a derived column came from, per fragment."""
        from omnitable.features.status import lineage

        return lineage(self, self.snapshot(), column, batch)

    def _write_options(
        self, row_group_size: int | None, target_fragment_rows: int | None
    ) -> WriteOptions:
        """Write options through the settings chain: argument, warehouse, table property."""
        return WriteOptions.resolve(
            self._settings_sources(),
            row_group_size=row_group_size,
            target_fragment_rows=target_fragment_rows,
        )

    def _settings_sources(self) -> Sources:
        """This table's settings below an explicit argument (docs/settings.md)."""
        return Sources(self.warehouse.settings, self.record.properties)


def _check_append_name(name: object) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > 256 or _CONTROL.search(name):
        raise ValidationError(
            f"Cannot append: append_name must be a non-empty string of at most 256 printable "
            f"characters (e.g. 'cc/2026-10/v1'), got {name!r}"
        )


__all__ = ["APPEND_NAME", "MAIN", "ROW_ID", "BatchInfo", "ScanResult", "Table"]
