"""``Table``: one logical wide table — the facade; every operation delegates to a service
(ingest, features, exec) or to storage, given the table's :class:`~omnitable.context.TableContext`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.records import CommitRecord, TableRecord
from omnitable.catalog.refs import Ref, check_ref_name
from omnitable.catalog.snapshot import FULL_SCOPE, Snapshot, SnapshotScope, columns_named
from omnitable.context import TableContext, WarehouseHandle
from omnitable.dataops.columns import rename_column, restore, retire, retired_names
from omnitable.dataops.delete import DeleteResult, delete_rows
from omnitable.dataops.lookup import lookup_rows
from omnitable.dataops.merge import MergeResult
from omnitable.dataops.merge import merge as merge_branches
from omnitable.dataops.revert import revert
from omnitable.dataops.rollback import rollback
from omnitable.dataops.update import UpdateResult, update_rows
from omnitable.dataops.upsert import UpsertResult, upsert_rows
from omnitable.exceptions import ValidationError
from omnitable.format.access import read_access, record_access, summarize
from omnitable.format.fs import Location
from omnitable.format.reader import FragmentReader, ReadPlan, ReadStats
from omnitable.governance.job import MaintenanceResult
from omnitable.governance.service import GovernService, maintain_once
from omnitable.governance.view_reads import read_from_view
from omnitable.ingest.append import append
from omnitable.ingest.columns import add_columns
from omnitable.settings import READ_ACCESS_LOG, READ_LATE_MATERIALIZATION_MAX_SELECTIVITY
from omnitable.training.stats import QUANTILES, TableStatistics, table_stats
from omnitable.vocabulary.keys import table_key
from omnitable.vocabulary.names import APPEND_NAME, MAIN, ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from omnitable.exec.backfill import BackfillPlan
    from omnitable.features.definition import Feature
    from omnitable.features.status import LineageRecord, StatusGrid
    from omnitable.isolation.policy import IsolationPolicy
    from omnitable.training.export import ExportResult
    from omnitable.training.mmap import MmapExport


_COLUMNS_ONLY = SnapshotScope(fragments=False, files=False, batches=frozenset())


class BatchInfo(NamedTuple):
    """A batch (one ``_ai_append_name_``) of a table (a named tuple: a table of 15,000 batches
    lists them in milliseconds)."""

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

    def __init__(self, warehouse: WarehouseHandle, record: TableRecord, branch: str = MAIN) -> None:
        self.warehouse = warehouse
        self.record = record
        self._ctx = TableContext.of(warehouse, record, branch)

    # -- identity and metadata ------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def location(self) -> Location:
        return self._ctx.location

    def snapshot(
        self,
        *,
        version: int | None = None,
        branch: str | None = None,
        tag: str | None = None,
        with_files: bool = True,
        scope: SnapshotScope = FULL_SCOPE,
    ) -> Snapshot:
        """The catalog state of one version (default: head of ``main``); only ``scope`` (default:
        everything) is loaded."""
        return self._ctx.snapshot(
            branch=branch, tag=tag, version=version, with_files=with_files, scope=scope
        )

    @property
    def schema(self) -> pa.Schema:
        """Logical schema at the head of ``main`` (system columns first)."""
        return self.snapshot(scope=_COLUMNS_ONLY).arrow_schema()

    @property
    def version(self) -> int:
        """Current version (head of this table's branch, :attr:`current_branch`)."""
        return self._ctx.head_version()

    @property
    def current_branch(self) -> str:
        """The branch this ``Table`` reads and writes (``main`` unless from :meth:`branch`)."""
        return self._ctx.branch

    def batches(self, version: int | None = None) -> list[BatchInfo]:
        """Batches with their row and fragment counts, in read order (by read position: a
        rollback, revert or merge keeps a batch's place, a replace moves it last)."""
        branch = None if version is not None and self._ctx.branch == MAIN else self._ctx.branch
        counts = self._ctx.catalog.batch_counts(self.record, version, branch)
        return list(map(BatchInfo._make, counts))

    def history(self, limit: int | None = None) -> list[CommitRecord]:
        """Commits of this table's branch and the ones it forked from, newest first: version,
        op, summary, time; the ``limit`` newest only when given (the catalog returns no more).

        Raises:
            ValidationError: ``limit`` is not a positive integer.
        """
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValidationError(
                f"Cannot list the history of table '{self.name}': limit must be a positive "
                f"integer or None, got {limit!r}"
            )
        return self._ctx.catalog.history(self.record, self._ctx.branch, limit=limit)

    def runs(self, limit: int | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """This table's ingest and backfill runs, newest first: ``run_id``, ``kind``, ``status``
        (``running``, ``succeeded``, ``failed``, ``aborted``, or ``abandoned`` for a run still
        marked running whose driver process is gone), ``plan``, ``metrics`` (a backfill's
        per-step metrics under ``steps``), ``message`` (why it failed), ``started_at``,
        ``finished_at``, ``host``, ``pid``, ``table``; only runs of ``status`` and the
        ``limit`` newest when given (docs/observability.md).

        Raises:
            ValidationError: ``limit`` is not a positive integer, ``status`` not a run status.
        """
        return self._ctx.catalog.list_runs(self.record, limit=limit, status=status)

    def count(self, version: int | None = None) -> int:
        return sum(b.rows for b in self.batches(version))

    def __repr__(self) -> str:
        on = "" if self._ctx.branch == MAIN else f", branch={self._ctx.branch!r}"
        return f"Table({self.name!r}{on}, warehouse={self.warehouse.address.display()!r})"

    # -- branches and tags (docs/branches.md) -----------------------------------------------

    def branch(self, name: str) -> Table:
        """This table bound to branch ``name``: reads default to its head (and time travel to
        versions of its history), and every write, data operation and backfill commits to it.

        Raises:
            NotFoundError: no such branch. ValidationError: not a branch name.
        """
        check_ref_name(name, "branch")
        self._ctx.catalog.get_ref(self.record, name, "branch")
        return Table(self.warehouse, self.record, name)

    def create_branch(
        self,
        name: str,
        from_version: int | None = None,
        *,
        from_branch: str | None = None,
        from_tag: str | None = None,
    ) -> Table:
        """Create branch ``name`` and return this table bound to it. It starts as the state of
        ``from_version`` of ``from_branch``'s history (default: this table's branch; version
        default: its head), or of tag ``from_tag``. Only a catalog row is written: no data is
        copied, whatever the table's size.

        Raises:
            ValidationError: a bad name, or ``from_tag`` with a version or branch.
            AlreadyExistsError: a branch or tag has that name. NotFoundError: unknown source
                branch, tag or version (or a version outside the source branch's history).
        """
        check_ref_name(name, "branch")
        source = self._ctx.branch if from_branch is None else from_branch
        version = _version_arg(from_version, "branch")
        if from_tag is not None:
            if from_version is not None or from_branch is not None:
                raise ValidationError(
                    f"Cannot create branch '{name}': give from_tag alone, or from_version and/or "
                    "from_branch"
                )
            tag = self._ctx.catalog.get_ref(self.record, check_ref_name(from_tag, "tag"), "tag")
            source, version = str(tag.parent), tag.version
        else:
            check_ref_name(source, "branch")
        self._ctx.catalog.create_ref(self.record, name, "branch", source=source, version=version)
        return Table(self.warehouse, self.record, name)

    def branches(self) -> list[Ref]:
        """The table's branches by name (``main`` included): head ``version``, the ``parent``
        branch and ``fork_version`` it forked at, ``created_at``."""
        return self._ctx.catalog.list_refs(self.record, "branch")

    def delete_branch(self, name: str) -> None:
        """Delete branch ``name``. Its data files stay until cleanup; a job still writing to it
        fails at commit (NotFoundError) and commits nothing; a new branch of the same name
        starts from its own fork, not from the deleted one.

        Raises:
            ValidationError: ``main``, or branches or tags are based on it (listed).
            NotFoundError: no such branch.
        """
        self._ctx.catalog.delete_ref(self.record, check_ref_name(name, "branch"), "branch")

    def create_tag(
        self, name: str, version: int | None = None, *, max_age: float | dt.timedelta | None = None
    ) -> Ref:
        """Pin ``version`` (default: the head) of this table's branch as tag ``name``; read it
        with ``read(tag=name)`` or Spark's ``VERSION AS OF 'name'``. ``max_age`` (seconds or a
        timedelta): how long cleanup must keep the tagged version (default: until deleted).

        Raises:
            ValidationError: a bad name or max_age. AlreadyExistsError: the name is taken.
            NotFoundError: a version outside this branch's history.
        """
        check_ref_name(name, "tag")
        at = _version_arg(version, "tag")
        age = _max_age(name, max_age)
        return self._ctx.catalog.create_ref(
            self.record, name, "tag", source=self._ctx.branch, version=at, max_age_s=age
        )

    def tags(self) -> list[Ref]:
        """The table's tags by name: ``version``, its branch (``parent``), ``created_at``,
        ``max_age_s`` and ``expires_at``."""
        return self._ctx.catalog.list_refs(self.record, "tag")

    def merge(
        self, source_branch: str, into: str | None = None, *, strategy: str = "fail"
    ) -> MergeResult:
        """Merge branch ``source_branch`` into ``into`` (default: this table's branch) at column
        grain: every (fragment, column) cell, deleted row, batch and column the source changed
        since the merge base and the target did not is adopted, pointing at the source's files
        (no data is copied). A fast-forward when the target has not moved since the source
        forked from it. Conflicts (the same cell changed on both sides, a row deleted on one
        and updated on the other, a batch replaced on both, a column renamed differently, a
        key inserted on both) fail the merge with ``strategy="fail"`` and are listed in
        ``MergeConflict.details``; ``"ours"`` keeps the target's side, ``"theirs"`` takes the
        source's (docs/branches.md, "Merging").

        Raises:
            MergeConflict, ValidationError (names, strategy, a branch into itself),
            NotFoundError (unknown branch).
        """
        target = self._ctx.branch if into is None else into  # (not `or`: "" is a bad name)
        return merge_branches(self._ctx, source_branch, target, strategy)

    def rebase(self, branch: str, onto: str = MAIN, *, strategy: str = "fail") -> MergeResult:
        """Bring ``onto``'s changes since the merge base into ``branch`` (a merge of ``onto``
        into ``branch``: one ``merge`` commit on the branch; ``ours`` is the branch's side), so
        the branch is tested against the current ``onto`` before it is merged back."""
        return merge_branches(self._ctx, onto, branch, strategy)

    def publish(
        self,
        branch: str,
        checks: Iterable[Callable[[Table], object] | str] = (),
        *,
        into: str = MAIN,
        spark: SparkSession | None = None,
        strategy: str = "fail",
    ) -> MergeResult:
        """Write-audit-publish: run ``checks`` on ``branch``, then merge it into ``into`` only
        if every one passes. A check is a callable given the branch's ``Table`` (it fails by
        returning False or raising), or a SQL assertion run on Spark whose first column of
        every row must be true, with ``{table}`` standing for the branch's rows, e.g.
        ``"SELECT COUNT(*) = 0 FROM {table} WHERE label IS NULL"``.

        Raises:
            AuditFailed: a check failed (nothing merged; its name and why).
            MergeConflict and the errors of :meth:`merge`.
        """
        from omnitable.dataops.audit import run_checks

        run_checks(self.branch(branch), list(checks), spark)
        return self.merge(branch, into, strategy=strategy)

    def delete_tag(self, name: str) -> None:
        """Delete tag ``name`` (its version stays in the history).

        Raises:
            NotFoundError: no such tag.
        """
        self._ctx.catalog.delete_ref(self.record, check_ref_name(name, "tag"), "tag")

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

        A read of ``columns`` of every batch that a fresh hot column-group view covers (with
        the columns ``where`` names) reads the view's files instead: the same rows, in the
        view's order (batch by batch in append order, each batch's sorted by the view's sort
        column); ``scan(...).stats.view`` names it, the setting ``read.views`` turns it off
        (docs/governance.md "Hot column-group views").

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
        """Like :meth:`read`, also returning what the read touched (fragments, files, bytes, and
        the view that answered it, if one did)."""
        batches = _batch_list(batches)
        hit = None
        if columns is not None and batches is None:
            hit = read_from_view(self._ctx, columns, where, version, branch, tag)
        if hit is not None:
            table, stats, snap = hit
        else:
            reader = self._reader(SnapshotScope.of(batches, columns, where), version, branch, tag)
            (table, stats), snap = reader.read(columns, where, batches), reader.snapshot
        if columns is not None and self._ctx.settings.resolve(READ_ACCESS_LOG):
            self._record_access(snap, table.column_names, where)
        return ScanResult(table, stats)

    def _record_access(self, snap: Snapshot, names: list[str], where: Any) -> None:
        """One entry in the access log for a scan of ``names`` and the columns ``where`` names
        (best effort, never raises)."""
        read = set(names)
        if where is not None:  # a superset of the filter's columns is harmless
            read.update(columns_named(str(where), snap.column_names()))
        ids = [(c.column_id, c.name) for c in snap.columns if c.name in read]
        record_access(self.location, table_id=self.record.table_id, branch=snap.branch,
                      version=snap.version, columns=ids)  # fmt: skip

    def access_log(
        self, since: dt.datetime | dt.timedelta | None = None, *, branch: str | None = None
    ) -> list[dict[str, Any]]:
        """The column sets scans read together (docs/governance.md, "Access log"), most scanned
        first: ``{"columns": [names at the head], "count": scans, "last": newest time}``.

        Args:
            since: only scans at or after this time (a ``timedelta``: that long ago); None: all.
            branch: only scans of this branch (None: every branch).

        Raises:
            ValidationError: ``since`` is neither a datetime, a timedelta nor None.
        """
        cutoff = _since(since, "read the access log")
        entries = read_access(self.location, since=cutoff, branch=branch)
        names = {c.column_id: c.name for c in self.snapshot(scope=FULL_SCOPE).columns}
        return summarize(entries, names)

    def plan(
        self,
        columns: list[str] | None = None,
        where: pc.Expression | None = None,
        version: int | None = None,
        batches: list[str] | None = None,
        *,
        branch: str | None = None,
        tag: str | None = None,
    ) -> ReadPlan:
        """What :meth:`read` with these arguments would visit (fragments after pruning, the
        files providing the columns), without opening a file. A plan of every batch without a
        filter counts the files in the catalog rather than loading them
        (:func:`omnitable.catalog.provider_count.count_providers_in_catalog`)."""
        batches = _batch_list(batches)
        scope = SnapshotScope.of(batches, columns, where)
        if where is not None or batches is not None:
            return self._reader(scope, version, branch, tag).plan(columns, where, batches)
        reader = self._reader(dataclasses.replace(scope, files=False), version, branch, tag)
        count = functools.partial(self._ctx.catalog.count_providers, reader.snapshot)
        return reader.plan(columns, None, None, count_files=count)

    def _reader(
        self, scope: SnapshotScope, version: int | None, branch: str | None, tag: str | None
    ) -> FragmentReader:
        """A reader over the snapshot of ``scope`` (what the read needs, nothing more; one
        loaded before for the same resolved version is reused)."""
        snap = self._ctx.snapshot(version=version, branch=branch, tag=tag, scope=scope, reuse=True)
        selectivity = self._ctx.settings.resolve(READ_LATE_MATERIALIZATION_MAX_SELECTIVITY)
        return FragmentReader(self.location, snap, selectivity)

    def stats(
        self,
        columns: list[str] | None = None,
        version: int | None = None,
        *,
        tag: str | None = None,
        branch: str | None = None,
        exact: bool = False,
        bins: int = 20,
        quantiles: tuple[float, ...] = QUANTILES,
    ) -> TableStatistics:
        """Per-column statistics of one version (docs/training.md "Statistics"): count, nulls,
        min, max from the catalog's file statistics (exact: fragments the metadata cannot
        answer, e.g. with deleted rows, are read); mean, std, quantiles, a histogram of ``bins``
        bins and the distinct count by one scan on first access (approximate quantiles past
        2,048 values and distinct counts past 50,000 unless ``exact``).

        Raises:
            UnknownColumnError, NotFoundError (version, tag, branch), ValidationError.
        """
        names = None if not isinstance(columns, list) else columns
        scope = SnapshotScope(columns=None if names is None else frozenset(names), stats=True)
        snap = self.snapshot(version=_version_arg(version, "statistics"), branch=branch,
                             tag=tag, scope=scope)  # fmt: skip
        return table_stats(
            self.location, snap, columns, exact=bool(exact), bins=bins, quantiles=quantiles
        )

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

        session = active_or_new_session(spark, self._ctx)
        wh = warehouse_string(self._ctx)
        reader = session.read.format("omnitable").option("warehouse", wh)
        if version is not None:
            reader = reader.option("versionAsOf", str(version))
        if branch is None and tag is None and self._ctx.branch != MAIN:
            branch = self._ctx.branch
        if branch is not None:
            reader = reader.option("branch", branch)
        if tag is not None:
            reader = reader.option("tag", tag)
        if batches is not None:
            reader = reader.option("batches", ",".join(batches))
        return reader.load(self.name)

    # -- training exports (docs/training.md) ----------------------------------------------

    def export_mmap(
        self,
        path: str | PathLike[str],
        features: list[str],
        label: str | None = None,
        version: int | None = None,
        *,
        tag: str | None = None,
        branch: str | None = None,
        where: pc.Expression | None = None,
        overwrite: bool = False,
    ) -> MmapExport:
        """Stream ``features`` (float32, row-major) and ``label`` of one snapshot to the
        directory ``path`` (``features.bin``, ``labels.bin``, ``schema.json`` with per-feature
        mean/std), one fragment in memory at a time; NULL becomes NaN. Read it with
        ``omnitable.torch.MmapDataset``. Written under a temporary name and renamed: a crash
        leaves ``path`` as it was.

        Raises:
            UnknownColumnError, ValidationError (non-numeric column, bad path),
            AlreadyExistsError (``path`` exists and not ``overwrite``).
        """
        from omnitable.training.mmap import export_mmap

        cols = (
            [*features, *([label] if isinstance(label, str) else [])]
            if isinstance(features, list)
            else None
        )
        reader = self._reader(SnapshotScope.of(None, cols, where), version, branch, tag)
        return export_mmap(reader, path, features, label, where, overwrite=overwrite)

    def export_delta(
        self,
        path: str | PathLike[str],
        version: int | None = None,
        *,
        tag: str | None = None,
        branch: str | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> ExportResult:
        """Export one snapshot (default: the head) to the Delta table at ``path`` (deltalake):
        the first call writes it all, later calls only what changed since the version the
        target holds (new fragments appended; rows of changed fragments deleted and written
        again; a schema change rewrites the target). Exactly once: the version is recorded in
        the target, so a re-run does nothing (docs/training.md, "Exports").

        Raises:
            ValidationError: the target holds another table or a newer version.
            ImportError: the ``export`` extra is not installed.
        """
        from omnitable.training.export_delta import export_delta

        snap = self.snapshot(version=version, branch=branch, tag=tag)
        old = branch or self._ctx.branch
        return export_delta(
            self.location, snap, lambda v: self.snapshot(version=v, branch=old), path,
            storage_options,
        )  # fmt: skip

    def export_iceberg(
        self,
        catalog_uri: str | None,
        name: str,
        version: int | None = None,
        *,
        tag: str | None = None,
        branch: str | None = None,
        warehouse: str | None = None,
    ) -> ExportResult:
        """Export one snapshot to the Iceberg table ``name`` (``namespace.table``) of the
        pyiceberg SQL catalog at ``catalog_uri`` (a SQLAlchemy URL; None: this warehouse's
        PostgreSQL database), data files under ``warehouse`` (default: ``_exports/iceberg``
        under the warehouse root). Incremental and exactly once like :meth:`export_delta`,
        each export one Iceberg transaction (docs/training.md, "Exports").

        Raises:
            ValidationError: bad name or URI, the target holds another table or a newer
                version.
            ImportError: the ``export`` extra is not installed.
        """
        from omnitable.training.export_iceberg import export_iceberg

        snap = self.snapshot(version=version, branch=branch, tag=tag)
        old = branch or self._ctx.branch
        if catalog_uri is None:
            address = self._ctx.address
            if address.is_sqlite:
                raise ValidationError(
                    f"Cannot export table '{self.name}' to Iceberg: pass catalog_uri (a "
                    "SQLAlchemy URL such as sqlite:////path/iceberg.db); only a PostgreSQL "
                    "warehouse provides a default"
                )
            catalog_uri = address.connect_url().render_as_string(hide_password=False)
        data = warehouse or self._ctx.root.join("_exports", "iceberg").uri
        return export_iceberg(
            self.location, snap, lambda v: self.snapshot(version=v, branch=old), catalog_uri,
            name, data,
        )  # fmt: skip

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
        options = self._ctx.options(row_group_size, target_fragment_rows)
        return append(self._ctx, data, append_name, mode, options)

    def add_columns(self, data: Any, group: str | None = None) -> int:
        """Attach new columns to existing rows, keyed by ``_ai_unique_id_``; returns the version.

        Writes one new column file per fragment that has at least one of the given ids (no
        existing file is rewritten); rows not covered read as NULL. The new columns form a new
        column group (``group``, default derived from the first column's name).

        Raises:
            ValidationError: missing/null/duplicate/unknown ids, columns that already exist, or
                a group name that is already used. Nothing is committed.
        """
        return add_columns(self._ctx, data, group)

    # -- data operations ----------------------------------------------------------------------

    def delete(
        self,
        where: pc.Expression | None = None,
        *,
        ids: list[int] | None = None,
        why: str | None = None,
    ) -> DeleteResult:
        """Delete rows: those where ``where`` is true (NULL counts as false), or those whose
        ``_ai_unique_id_`` is in ``ids``. One commit of per-fragment deletion vectors; no data
        file is rewritten and time travel to an earlier version still sees the rows
        (docs/dataops.md). A delete that matches nothing commits nothing
        (``DeleteResult.version`` is None).

        Raises:
            ValidationError: neither or both of ``where`` and ``ids``, or a malformed one.
            UnknownColumnError: ``where`` names an unknown column.
            NotFoundError: some ``ids`` are not live rows (nothing is deleted).
            CommitConflict: concurrent deletes of the same fragments won every retry.
        """
        return delete_rows(self._ctx, where, ids, why=why)

    def update(
        self, data: Any, columns: list[str] | None = None, *, why: str | None = None
    ) -> UpdateResult:
        """Set some columns of some rows: ``data`` (Arrow, pandas or Spark) holds
        ``_ai_unique_id_`` and the new values; ``columns`` (default: all of data's other
        columns) says which to update. Writes, per touched fragment, one file of the updated
        columns only (docs/dataops.md); one commit.

        Raises:
            ValidationError, UnknownColumnError, NotFoundError (ids that are not live rows),
            CommitConflict (a concurrent write of the same fragment and column). Nothing is
            committed on error.
        """
        return update_rows(self._ctx, data, columns, why=why)

    @property
    def key(self) -> list[str] | None:
        """The key columns of a keyed table (``create_table(key=...)``), else None."""
        return table_key(self.record.properties)

    def upsert(
        self,
        data: Any,
        policy: Any = "last_write_wins",
        *,
        append_name: str | None = None,
        why: str | None = None,
        spark: SparkSession | None = None,
        isolation: IsolationPolicy | None = None,
    ) -> UpsertResult:
        """Insert or merge ``data`` by the table's key, in one commit (docs/dataops.md).

        Rows with a new key become a new batch (``append_name``, default ``upsert/<time>-<id>``);
        rows with a key a live row holds are merged under ``policy``: ``"last_write_wins"``,
        ``"first_write_wins"``, ``"append_list"`` or a function ``(stored, incoming) ->
        merged`` on pandas DataFrames (or its ``"module:function"`` reference), run isolated
        under ``isolation`` (an ``omnitable.isolation.IsolationPolicy``: budgets, mode).
        Rows with a NULL key, a key given twice, a key whose 64-bit hash another key holds
        (keys of several integer or date columns: ``key_collision``), or on which the policy
        fails are rejected:
        returned in ``UpsertResult.rejected`` and recorded in the error table (``errors()``;
        this uses ``spark``, the active session or a new local one; when that fails, after the
        commit, a warning says why and ``errors_recorded`` is False), never written.

        Raises:
            ValidationError: not a keyed table, an unknown policy, no key column or
                ``_ai_unique_id_`` in data. SchemaMismatchError, UnknownColumnError: bad
                columns. CommitConflict: concurrent writers of the same keys or cells won every
                retry. Nothing is committed on error.
        """
        result = upsert_rows(
            self._ctx, data, policy, append_name=append_name, why=why, isolation=isolation
        )
        if result.error_rows:
            from omnitable.exec.errors import record_rejected_input

            problem = record_rejected_input(spark, self._ctx, result.error_rows)
            if problem is not None:
                result = dataclasses.replace(result, errors_recorded=False)
        return result

    def lookup(
        self,
        keys: Any,
        columns: list[str] | None = None,
        *,
        version: int | None = None,
        verify_keys: bool = False,
    ) -> pa.Table:
        """The live rows holding ``keys``, through the key index (no scan): ``keys`` is a list
        of key values (tuples for a key of several columns), a pyarrow Table or a pandas
        DataFrame of the key columns. Rows come back in the order of ``keys``; keys no live
        row holds are left out. ``columns`` default to all; ``version`` reads an older state.

        The index matches keys by a 128-bit hash, as upserts do, and the key columns returned
        are the keys asked for; ``verify_keys=True`` reads the stored keys back and leaves out
        a row whose key differs (a hash collision; docs/dataops.md), at the cost of decoding
        the key columns' pages. Keys of several integer or date columns, whose hash is 64
        bits, are always read back.

        Raises:
            ValidationError: not a keyed table, NULL or unconvertible keys.
            UnknownColumnError: an unknown column.
        """
        if not isinstance(verify_keys, bool):
            raise ValidationError(f"verify_keys must be True or False, got {verify_keys!r}")
        return lookup_rows(self._ctx, keys, columns, {"version": version}, verify_keys)

    def rollback(self, version: int, *, why: str | None = None) -> int:
        """Make ``version``'s state (rows, deletes, columns, files, features) the head, as one
        new commit; the versions in between stay in the history (time travel still reads them).
        Returns the new version. No data file is written or deleted (docs/dataops.md).

        Raises:
            ValidationError (not older than the head), NotFoundError (no such version),
            CommitConflict (a commit landed meanwhile; nothing is discarded unseen).
        """
        return rollback(self._ctx, version, why=why)

    def revert(self, version: int, *, dependents: str = "fail", why: str | None = None) -> int:
        """Undo exactly commit ``version`` and keep every later one: files, batches, deletes
        and column changes it added are removed, what it removed comes back, feature versions
        it registered stop being current. Returns the new version (docs/dataops.md).

        ``dependents="stale"`` reverts even when later backfills read what it wrote (they
        become stale; ``backfill`` recomputes them); the default fails and names them.

        Raises:
            ValidationError, NotFoundError, CommitConflict (a later commit changed what it
            changed). Nothing is committed on error.
        """
        return revert(self._ctx, version, dependents=dependents, why=why)

    def rename_column(self, old: str, new: str) -> int:
        """Rename a raw column; returns the new version. Only the catalog changes (files name
        columns by id); earlier versions keep the old name (docs/dataops.md).

        Raises:
            NotFoundError, AlreadyExistsError, ValidationError (system columns, features'
            outputs and inputs, invalid names).
        """
        return rename_column(self._ctx, old, new)

    def retire(self, column: str) -> int:
        """Retire a column: hidden from reads, the schema, Spark and backfill planning; data
        and name kept; :meth:`restore` brings it back. A feature's output retires the feature
        (all its outputs; it is no longer planned or recomputed). Returns the new version.

        Raises:
            NotFoundError: no such active column. ValidationError: a system column, or an input
                of a feature that is not retired.
        """
        return retire(self._ctx, column)

    def restore(self, column: str) -> int:
        """Make a retired column (with the other outputs of its feature) active again; returns
        the new version.

        Raises:
            NotFoundError: no retired column of that name. ValidationError: it is active.
        """
        return restore(self._ctx, column)

    def retired(self) -> list[str]:
        """The names of the retired columns (see :meth:`retire`)."""
        return retired_names(self._ctx.all_columns()[1])

    # -- governance -----------------------------------------------------------------------

    def maintain(
        self,
        jobs: Iterable[str] = ("compact",),
        *,
        dry_run: bool = False,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        owner: str | None = None,
        lease_ttl_s: float | None = None,
    ) -> list[MaintenanceResult]:
        """Run maintenance jobs on this table's branch, in order, each Prepare -> Execute ->
        Commit (docs/governance.md): ``compact`` merges small fragments of a batch, ``fold``
        rewrites batches with many deleted rows or update overlays. ``options``: job name ->
        that job's keyword options (e.g. ``{"compact": {"target_fragment_rows": 100_000}}``).
        A dry run only prepares (each result's ``plan`` says what would be done); a job whose
        commit conflicts prepares again, and is ``skipped`` after 3 conflicts.

        Each job runs under its catalog lease, as a governance service's does (``owner``
        names this run in it, default ``maintain:<host>:<pid>:<random>``; ``lease_ttl_s``
        defaults to the ``governance.lease_ttl_s`` setting): a job whose lease another owner
        holds is not run, its result is ``leased`` (``summary``: ``holder``, ``expires``); a
        lease lost mid-job commits nothing, its result is ``lease_lost``; the other jobs still
        run. A dry run takes no lease.

        Raises:
            ValidationError: an unknown job name (the message lists the known ones), options
                a job does not take, or a bad ``lease_ttl_s``.
        """
        names = [jobs] if isinstance(jobs, str) else list(jobs)
        if not names:
            raise ValidationError("Cannot maintain: give at least one job name, e.g. ['compact']")
        return maintain_once(self._ctx, names, dry_run=dry_run, options=options, owner=owner,
                             ttl_s=lease_ttl_s)  # fmt: skip

    def governor(
        self,
        jobs: Iterable[str] = ("compact",),
        *,
        interval: str | float,
        rounds: int | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        ttl_s: float | None = None,
        owner: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> GovernService:
        """A governance service for this table's branch (docs/governance.md, "Running as a
        service"): ``.run()`` runs ``jobs`` every ``interval`` (seconds or ``"10m"``) for
        ``rounds`` rounds (None: until ``.stop()``), each job under a lease so two services
        never run the same job at once; returns one report per round.

        Raises:
            ValidationError: unknown jobs or options, a bad interval, TTL or number of rounds.
        """
        names = [jobs] if isinstance(jobs, str) else list(jobs)
        return GovernService(self._ctx, names, interval=interval, rounds=rounds, options=options,
                             ttl_s=ttl_s, owner=owner, progress=progress)  # fmt: skip

    def create_view(self, name: str, columns: list[str]) -> dict[str, Any]:
        """Declare a hot column-group view: ``columns`` (and ``_ai_unique_id_``) materialized as
        a Delta table under the table location, kept fresh per batch by the ``views`` job
        (``maintain(["views"])``); Spark answers reads covered by a fresh view from it
        (docs/governance.md "Hot column-group views"). Returns the view's description.

        Raises:
            ValidationError: an invalid or taken name, no columns, or an unknown column.
        """
        from omnitable.governance.views import declare_view

        return _view_info(declare_view(self._ctx, name, columns))

    def drop_view(self, name: str) -> None:
        """Forget view ``name`` and delete its Delta table.

        Raises:
            ValidationError: no such view.
        """
        from omnitable.governance.views import drop_view

        drop_view(self._ctx, name)

    def views(self) -> list[dict[str, Any]]:
        """The declared views: name, columns, Delta path, recorded Delta version and batches,
        the table version and branch of the last refresh, and the number of data files recorded
        with it (Spark reads them directly; None: not recorded, Spark reads through Delta)."""
        from omnitable.governance.views import list_views

        return [_view_info(v) for v in list_views(self._ctx)]

    # -- features -------------------------------------------------------------------------

    def register(self, *features: Feature) -> int | None:
        """Register feature definitions (new ones, or new versions); returns the new version or
        None when nothing changed. A pandas feature other processes cannot import (defined in a
        notebook cell, a script's ``__main__``, a closure, a lambda) is stored pickled in the
        table directory (docs/features.md, "Features defined in notebooks and scripts").

        Raises:
            ValidationError: unknown inputs, output clashes, cycles, changed code under an
                unchanged version, or a pandas feature that can be neither imported nor pickled.
        """
        from omnitable.features.registry import register

        return register(self._ctx, features)

    def features(self) -> list[Feature]:
        """The current version of every registered feature."""
        from omnitable.features.registry import current_features

        return list(current_features(self._ctx).values())

    def backfill(
        self,
        targets: str | list[str],
        batches: list[str] | None = None,
        *,
        retry_errors: bool = False,
        queue: bool = False,
    ) -> BackfillPlan:
        """Plan the minimal work bringing ``targets`` (features or output columns) up to date.

        Nothing runs until ``plan.run()``; ``plan.explain()`` shows the steps, the fused groups,
        what is reused and why, and estimated input bytes. With ``retry_errors=True``, records
        that failed a feature earlier are recomputed (only those records; after a fix and a
        version bump everything is recomputed anyway). With ``queue=True``, ``plan.run()`` works
        as one worker of the plan's durable work queue, shared with every process running the
        same backfill (docs/features.md, "Work queue").
        """
        from omnitable.exec.backfill import BackfillPlan
        from omnitable.features.planner import make_plan
        from omnitable.features.registry import table_graph

        if isinstance(targets, str):
            targets = [targets]
        if isinstance(batches, str):
            batches = [batches]
        ctx = self._ctx
        graph = table_graph(ctx)
        counts = ctx.catalog.error_counts(self.record) if retry_errors else None
        # the named batches only (None: all), the files of the features' columns only
        snap_scope = _features_scope(graph.features.values(), batches)
        snap = ctx.snapshot(scope=snap_scope)
        plan = make_plan(ctx, graph, snap, list(targets), batches, retry_errors, counts)
        bound = BackfillPlan.bind(
            plan, ctx, lambda: self.backfill(targets, batches, retry_errors=retry_errors)
        )
        bound.on_branch = lambda b: self.branch(b).backfill(
            targets, batches, retry_errors=retry_errors, queue=queue
        )
        bound.queue = queue
        bound.plan_at = lambda v: make_plan(
            ctx, graph, ctx.snapshot(version=v, scope=snap_scope), list(targets), batches,
            retry_errors, counts,
        )  # fmt: skip
        return bound

    def status(self, version: int | None = None) -> StatusGrid:
        """Batch x derived-column grid of done / stale / missing / partial, with the number of
        failed records per cell."""
        from omnitable.features.registry import current_features
        from omnitable.features.status import status_grid

        features = current_features(self._ctx)
        return status_grid(
            self._ctx,
            self.snapshot(version=version, scope=_features_scope(features.values(), None)),
            features,
            self._ctx.catalog.error_counts(self.record),
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

        session = active_or_new_session(spark, self._ctx)
        return read_errors(
            session,
            self._ctx,
            self.snapshot(),
            feature=feature,
            run=run,
            include_resolved=include_resolved,
        )

    def errors_view(self, spark: SparkSession, name: str | None = None) -> str:
        """Register the visible error rows as a temporary view for Spark SQL; returns its name."""
        view = name or f"{self.name.replace('.', '_')}_errors"
        self.errors(spark=spark).createOrReplaceTempView(view)
        return view

    def lineage(self, column: str, batch: str | None = None) -> list[LineageRecord]:
        """Where the current data of a derived column came from, per fragment."""
        from omnitable.features.status import lineage

        scope = SnapshotScope.of(None if batch is None else [batch], [column])
        return lineage(self._ctx, self.snapshot(scope=scope), column, batch)


def _features_scope(features: Iterable[Feature], batches: list[str] | None) -> SnapshotScope:
    """What planning or reporting ``features`` reads of a snapshot: the files of their inputs
    and outputs (of ``batches``; None: all), without statistics."""
    return SnapshotScope.of(batches, sorted({c for f in features for c in (*f.inputs, *f.outputs)}))


def _batch_list(batches: list[str] | str | None) -> list[str] | None:
    """A ``batches`` argument as a list (one name may be given as a string)."""
    if batches is None:
        return None
    return [batches] if isinstance(batches, str) else list(batches)


__all__ = ["APPEND_NAME", "MAIN", "ROW_ID", "BatchInfo", "ScanResult", "Table"]


def _version_arg(version: object, what: str) -> int | None:
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValidationError(f"Cannot create the {what}: a version is an int, got {version!r}")
    return version


def _max_age(name: str, max_age: object) -> int | None:
    """A tag's retention in whole seconds (None: kept until deleted)."""
    if max_age is None:
        return None
    seconds = max_age.total_seconds() if isinstance(max_age, dt.timedelta) else max_age
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 1:
        raise ValidationError(
            f"Cannot create tag '{name}': max_age must be at least 1 second (a number of seconds "
            f"or a datetime.timedelta), got {max_age!r}"
        )
    return int(seconds)


def _since(since: dt.datetime | dt.timedelta | None, action: str) -> dt.datetime | None:
    """``since`` as an aware UTC datetime (a timedelta: that long before now)."""
    if since is None:
        return None
    if isinstance(since, dt.timedelta):
        return dt.datetime.now(dt.timezone.utc) - since
    if isinstance(since, dt.datetime):
        return since if since.tzinfo is not None else since.replace(tzinfo=dt.timezone.utc)
    raise ValidationError(
        f"Cannot {action}: since must be a datetime, a timedelta or None, got {since!r}"
    )


def _view_info(view: Any) -> dict[str, Any]:
    doc = view.to_doc()
    return {"name": view.name, "columns": doc["columns"], "path": doc["path"],
            "delta_version": doc["delta_version"], "batches": len(doc["batches"]),
            "refreshed_version": doc["refreshed_version"], "branch": doc["branch"],
            "data_files": None if doc["files"] is None else len(doc["files"])}  # fmt: skip
