"""The Python merge-on-read reader: zip a fragment's aligned column files, no key join.

For every live fragment the reader opens one Parquet reader per file that provides a requested
column and zips the columns by position (row-group boundaries may differ between files; Arrow
chunked arrays absorb that without copying). Columns no file provides read as NULL, and
``_ai_append_name_`` is the fragment's batch name. Fragments are skipped by batch and by the
catalog's column statistics; with a ``where`` filter the predicate columns are read first and
the other columns are decoded only from the pages (through the offset index,
:mod:`omnitable.format.pages`), else the row groups, that hold surviving rows (late
materialization; the writer gives wide columns small pages for it, docs/format.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from omnitable.catalog.records import ColumnRecord, DeletionRecord, FileRecord, FragmentRecord
from omnitable.catalog.snapshot import Snapshot, columns_mentioned
from omnitable.exceptions import (
    CorruptInputError,
    SchemaMismatchError,
    UnknownColumnError,
    ValidationError,
)
from omnitable.format.fs import Location, mapped_file
from omnitable.format.live_rows import LiveRows, live_rows
from omnitable.format.pages import (
    footer_cached,
    gather_dictionary,
    gather_plain,
    gather_strings,
    read_before,
    read_pages,
)
from omnitable.format.predicate import Bounds, pruner
from omnitable.format.predicate import survivors as simple_survivors
from omnitable.settings import READ_LATE_MATERIALIZATION_MAX_SELECTIVITY
from omnitable.vocabulary.names import APPEND_NAME, ROW_ID
from omnitable.vocabulary.stats import decode_value
from omnitable.vocabulary.types import ARROW_VALUE_ERRORS

_INDEX = "__omnitable_row__"
_PLAIN_TYPES = (pa.int32(), pa.int64(), pa.float32(), pa.float64())  # what can be read in place
_FILE_POOL: ThreadPoolExecutor | None = None
_FILE_POOL_LOCK = threading.Lock()


def _drop_deleted(arr: pa.ChunkedArray | pa.Array, live: LiveRows) -> pa.ChunkedArray | pa.Array:
    """``arr`` without the deleted rows (``live``: the fragment's live rows). A fixed-width
    column is gathered by the live offsets (faster than a filter for a vector deleting few
    rows); a variable-width one is filtered (gathering it is ~1.6x slower)."""
    keep, offsets = live
    return pc.take(arr, offsets) if _fixed_width(arr.type) else pc.filter(arr, keep)


def widens(stored: pa.DataType, want: pa.DataType) -> bool:
    """Whether every value of type ``stored`` is a value of ``want``, read as Spark's Parquet
    reader reads it: the same type (large or not), a wider integer, a float as a double, an
    integer of up to 32 bits as a double, a decimal with as many or more digits on each side."""
    if stored.equals(want):
        return True
    t = pa.types
    if t.is_string(stored) or t.is_large_string(stored):
        return t.is_string(want) or t.is_large_string(want)
    if t.is_binary(stored) or t.is_large_binary(stored):
        return t.is_binary(want) or t.is_large_binary(want)
    if t.is_signed_integer(stored) and t.is_signed_integer(want):
        return bool(stored.bit_width <= want.bit_width)
    if t.is_floating(stored) and t.is_float64(want):
        return True
    if t.is_signed_integer(stored) and t.is_float64(want):
        return bool(stored.bit_width <= 32)
    if t.is_decimal(stored) and t.is_decimal(want):
        return bool(stored.scale <= want.scale and
                    stored.precision - stored.scale <= want.precision - want.scale)  # fmt: skip
    return False


def _fixed_width(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t) or (
        pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t)
    )  # fmt: skip


def _file_pool() -> ThreadPoolExecutor:
    """Process-wide pool for reading a fragment's files in parallel (I/O and decoding release
    the GIL). Separate from the per-read fragment pool, so nested waits cannot deadlock."""
    global _FILE_POOL
    with _FILE_POOL_LOCK:
        if _FILE_POOL is None:
            _FILE_POOL = ThreadPoolExecutor(
                max_workers=max(4, (os.cpu_count() or 2) * 2), thread_name_prefix="omnitable-file"
            )
        return _FILE_POOL


def _forget_file_pool() -> None:
    """In a forked child (a DataLoader worker) the parent's pool threads do not exist: start a
    new pool there on first use instead of queueing work nothing will run."""
    global _FILE_POOL, _FILE_POOL_LOCK
    _FILE_POOL, _FILE_POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_file_pool)


@dataclass(frozen=True)
class ReadStats:
    """What a read touched (for tests, benchmarks and explain)."""

    fragments_total: int
    fragments_read: int
    files_opened: int
    bytes_read: int
    view: str | None = None
    """The hot column-group view that answered the read (None: the table's files did)."""


FileCounter = Callable[[list[str], list[int]], int]
"""How many files provide columns (by id) in fragments (by id): the contract of
:meth:`~omnitable.catalog.snapshot.Snapshot.count_providers`."""


@dataclass(frozen=True)
class ReadPlan:
    """The fragments a read visits (after pruning) and how many files provide its columns."""

    columns: list[str]
    where: pc.Expression | None
    where_columns: list[str]
    fragments_total: int
    fragments: list[FragmentRecord]
    files: int


class FragmentReader:
    """Reads columns of the fragments of one snapshot.

    ``max_selectivity``: the setting ``read.late_materialization_max_selectivity``.
    ``strict_types``: a column stored as another type than the catalog's is read only when the
    catalog's type holds all its values (:func:`widens`), as Spark's reader does; else
    :class:`SchemaMismatchError` (default: any type Arrow casts is read).
    """

    def __init__(
        self,
        location: Location,
        snapshot: Snapshot,
        max_selectivity: float = READ_LATE_MATERIALIZATION_MAX_SELECTIVITY.default,
        strict_types: bool = False,
    ) -> None:
        self.location = location
        self.snapshot = snapshot
        self.max_selectivity = max_selectivity
        self.strict_types = strict_types
        self._files_opened = 0
        self._bytes = 0
        self._lock = threading.Lock()

    # -- public ---------------------------------------------------------------------------

    def plan(
        self,
        columns: list[str] | None = None,
        where: pc.Expression | None = None,
        batches: list[str] | None = None,
        count_files: FileCounter | None = None,
    ) -> ReadPlan:
        """What a read would touch (columns checked, fragments pruned by statistics, the file
        providing each column of each fragment), without opening a file. ``count_files``
        counts the files providing the columns (default: the snapshot's
        :meth:`~omnitable.catalog.snapshot.Snapshot.count_providers`, over its loaded files)."""
        out_cols = self._check_columns(columns)
        where_cols = self._where_columns(where)
        fragments = self.snapshot.live_fragments(batches)  # fully deleted ones drop out
        total = len(fragments)
        if where is not None:
            fragments = self._prune(fragments, where, where_cols)
        ids = [c.column_id for c in self.snapshot.columns if c.name in {*out_cols, *where_cols}]
        count = count_files or self.snapshot.count_providers
        files = count([f.fragment_id for f in fragments], ids)
        return ReadPlan(out_cols, where, where_cols, total, fragments, files)

    def read(
        self,
        columns: list[str] | None = None,
        where: pc.Expression | None = None,
        batches: list[str] | None = None,
        use_threads: bool = True,
    ) -> tuple[pa.Table, ReadStats]:
        plan = self.plan(columns, where, batches)
        out_cols, where_cols, fragments = plan.columns, plan.where_columns, plan.fragments
        total = plan.fragments_total
        schema = self.output_schema(out_cols)

        def one(frag: FragmentRecord) -> pa.Table:
            return self.read_fragment(frag, out_cols, where, where_cols)

        if use_threads and len(fragments) > 1:
            workers = min(len(fragments), max(2, (os.cpu_count() or 2) * 2))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                parts = list(pool.map(one, fragments))
        else:
            parts = [one(f) for f in fragments]
        parts = [p for p in parts if p.num_rows > 0] or [schema.empty_table()]
        table = pa.concat_tables(parts)
        stats = ReadStats(total, len(fragments), self._files_opened, self._bytes)
        return table, stats

    @property
    def bytes_read(self) -> int:
        """Compressed bytes this reader has read so far (all reads, as :class:`ReadStats`)."""
        return self._bytes

    def output_schema(self, columns: list[str] | None) -> pa.Schema:
        """The fields :meth:`read` returns for ``columns`` (checked as it checks them)."""
        return pa.schema([self._field(c) for c in self._check_columns(columns)])

    def read_fragment(
        self,
        frag: FragmentRecord,
        out_cols: list[str],
        where: pc.Expression | None = None,
        where_cols: list[str] | None = None,
    ) -> pa.Table:
        """One fragment's live rows (not deleted, filtered by ``where``), columns ``out_cols``
        in that order."""
        schema = pa.schema([self._field(c) for c in out_cols])
        dv = self.snapshot.deletion(frag.fragment_id)
        if where is None:
            if dv is not None and dv.all_deleted:
                return schema.empty_table()
            arrays = self._read_columns(frag, out_cols, None, dv)
            return pa.Table.from_arrays([arrays[c] for c in out_cols], schema=schema)
        where_cols = where_cols or []
        pred_arrays = self._read_columns(frag, where_cols, None)
        survivors = self._survivors(frag, pred_arrays, where, where_cols)
        if len(survivors) == 0:
            return schema.empty_table()
        take = pa.array(survivors)
        payload = [c for c in out_cols if c not in pred_arrays]
        arrays = {c: pred_arrays[c].take(take) for c in out_cols if c in pred_arrays}
        arrays.update(self._read_columns(frag, payload, survivors))
        return pa.Table.from_arrays([arrays[c] for c in out_cols], schema=schema)

    def read_all_rows(self, frag: FragmentRecord, names: list[str]) -> pa.Table:
        """Every row of the fragment, deleted ones included, in offset order (what a writer
        aligning a new file to the fragment needs)."""
        arrays = self._read_columns(frag, names, None)
        return pa.Table.from_arrays([arrays[c] for c in names], names=names)

    def read_rows(self, frag: FragmentRecord, names: list[str], offsets: np.ndarray) -> pa.Table:
        """The rows at ``offsets`` (sorted, distinct) of the fragment, deleted or not; only the
        data pages holding them are read where the files' page indexes allow (a point lookup,
        :mod:`omnitable.format.pages`), else the row groups holding them."""
        arrays = self._read_columns(frag, names, offsets)
        return pa.Table.from_arrays([arrays[c] for c in names], names=names)

    def matching_rows(
        self, frag: FragmentRecord, where: pc.Expression, where_cols: list[str]
    ) -> tuple[np.ndarray, pa.Table]:
        """The offsets of the fragment's live rows where ``where`` is true (sorted), and those
        rows' ``where_cols`` (a delete reads no other column)."""
        pred_arrays = self._read_columns(frag, where_cols, None)
        survivors = self._survivors(frag, pred_arrays, where, where_cols)
        take = pa.array(survivors)
        columns = [pred_arrays[c].take(take) for c in where_cols]
        return survivors, pa.Table.from_arrays(columns, names=where_cols)

    def _survivors(
        self,
        frag: FragmentRecord,
        pred_arrays: dict[str, pa.ChunkedArray | pa.Array],
        where: pc.Expression,
        where_cols: list[str],
    ) -> np.ndarray:
        """Sorted offsets of the live rows where ``where`` is true (NULL counts as false)."""
        survivors = simple_survivors(where, pred_arrays)
        if survivors is None:
            survivors = self._filtered(frag, pred_arrays, where, where_cols)
        dv = self.snapshot.deletion(frag.fragment_id)
        return survivors if dv is None else survivors[~dv.mask()[survivors]]

    @staticmethod
    def _filtered(
        frag: FragmentRecord,
        pred_arrays: dict[str, pa.ChunkedArray | pa.Array],
        where: pc.Expression,
        where_cols: list[str],
    ) -> np.ndarray:
        """Offsets where ``where`` is true, evaluated by Acero (any expression)."""
        pred = pa.Table.from_arrays(
            [pred_arrays[c] for c in where_cols] + [pa.array(np.arange(frag.row_count))],
            names=[*where_cols, _INDEX],
        )
        try:
            return pred.filter(where).column(_INDEX).to_numpy()
        except ARROW_VALUE_ERRORS as exc:
            raise ValidationError(f"Cannot evaluate filter {where}: {exc}") from exc

    # -- columns --------------------------------------------------------------------------

    def _check_columns(self, columns: list[str] | None) -> list[str]:
        names = self.snapshot.column_names()
        if columns is None:
            return names
        if isinstance(columns, str) or not isinstance(columns, Iterable):
            raise ValidationError(
                f"Cannot read: columns must be a list of column names, got {columns!r}"
            )
        out = list(columns)
        known = set(names)
        for c in out:
            if c not in known:
                raise UnknownColumnError(
                    f"Cannot read column '{c}' of table '{self.snapshot.table.name}': no such "
                    f"column; columns are: {', '.join(names)}"
                )
        if len(set(out)) != len(out):
            raise ValidationError(f"Cannot read: columns {out} contain duplicates")
        return out

    def _field(self, name: str) -> pa.Field:
        if name == ROW_ID:
            return pa.field(ROW_ID, pa.int64(), nullable=False)
        if name == APPEND_NAME:
            return pa.field(APPEND_NAME, pa.string(), nullable=False)
        col = self.snapshot.column(name)
        return pa.field(name, col.arrow_type, nullable=True)

    def _where_columns(self, where: pc.Expression | None) -> list[str]:
        """Columns a filter references (a superset is harmless; :meth:`_prune` checks that the
        filter binds to them)."""
        if where is None:
            return []
        if not isinstance(where, pc.Expression):
            raise ValidationError(
                f"Cannot read: where must be a pyarrow.compute.Expression such as "
                f"pc.field('score') > 0.5, got {type(where).__name__}"
            )
        return columns_mentioned(str(where), self.snapshot.column_names())

    # -- pruning --------------------------------------------------------------------------

    def _prune(
        self, fragments: list[FragmentRecord], where: pc.Expression, where_cols: list[str]
    ) -> list[FragmentRecord]:
        """The fragments whose statistics do not rule ``where`` out, after checking that it
        binds to ``where_cols`` (binding against the mentioned columns only is enough: every
        column the filter names is among them, a name the table lacks fails either way, and
        it stays cheap on wide tables)."""
        records = {c.name: c for c in self.snapshot.columns}
        kept = self._prune_simple(fragments, where, where_cols, records)
        if kept is not None:
            return kept
        guarantees = [self._guarantee(f, where_cols, records) for f in fragments]
        schema = pa.schema([self._field(c) for c in where_cols])
        dataset = ds.FileSystemDataset.from_paths(
            [f"/omnitable/{f.fragment_id}" for f in fragments] or ["/omnitable/check"],
            schema=schema,
            format=ds.ParquetFileFormat(),
            filesystem=pafs.LocalFileSystem(),
            partitions=guarantees or [pc.scalar(True)],
        )
        try:
            found = dataset.get_fragments(filter=where)
            keep = {frag.path.rsplit("/", 1)[-1] for frag in found}
        except ARROW_VALUE_ERRORS as exc:
            msg = str(exc).splitlines()[0]
            if "No match for FieldRef" in msg:
                raise UnknownColumnError(
                    f"Cannot filter table '{self.snapshot.table.name}': the filter names a "
                    f"column it does not have ({msg.split(' in ')[0]}); columns are: "
                    + ", ".join(self.snapshot.column_names())
                ) from exc
            raise ValidationError(f"Cannot filter with {where}: {msg}") from exc
        return [f for f in fragments if f.fragment_id in keep]

    def _prune_simple(
        self,
        fragments: list[FragmentRecord],
        where: pc.Expression,
        where_cols: list[str],
        records: dict[str, ColumnRecord],
    ) -> list[FragmentRecord] | None:
        """The fragments ``where`` may hold on, decided from their statistics in Python when it
        is a simple comparison filter (:func:`omnitable.format.predicate.pruner`; a tenth of
        an Arrow dataset's pruning, whose set-up costs ~0.2 ms); None otherwise."""
        if not all(c in records for c in where_cols):
            return None  # Arrow's pruning names the unknown column
        check = pruner(where, {c: records[c].arrow_type for c in where_cols})
        if check is None:
            return None
        return [f for f in fragments if check(self._bounds(f, where_cols, records))]

    def _bounds(
        self, frag: FragmentRecord, where_cols: list[str], records: dict[str, ColumnRecord]
    ) -> dict[str, Bounds]:
        """What the fragment's statistics say of each column."""
        providers = self.snapshot.resolve(
            frag.fragment_id, [records[c].column_id for c in where_cols]
        )
        out: dict[str, Bounds] = {}
        for name in where_cols:
            col = records[name]
            provider = providers[col.column_id]
            if provider is None:  # the fragment predates the column: all NULL
                out[name] = Bounds(all_null=True, nulls=True)
                continue
            st = provider.stats(col.column_id)
            nulls = st.null_count > 0
            if st.min_value is None or st.max_value is None:
                all_null = frag.row_count > 0 and st.null_count >= frag.row_count
                out[name] = Bounds(all_null=all_null, nulls=nulls)
                continue
            t = col.arrow_type
            lo, hi = decode_value(st.min_value, t), decode_value(st.max_value, t)
            out[name] = Bounds(lo, hi, nulls=nulls)
        return out

    def _guarantee(
        self, frag: FragmentRecord, where_cols: list[str], records: dict[str, ColumnRecord]
    ) -> pc.Expression:
        """What the fragment's statistics (:meth:`_bounds`) and batch guarantee of
        ``where_cols``, as the partition expression of Arrow's pruning."""
        bounds = self._bounds(frag, [c for c in where_cols if c != APPEND_NAME], records)
        out = pc.scalar(True)
        for name in where_cols:
            field = pc.field(name)
            if name == APPEND_NAME:
                out = out & (field == pc.scalar(frag.batch_name))
                continue
            b = bounds[name]
            if b.all_null:
                out = out & field.is_null()
            elif b.lo is not None and b.hi is not None:
                t = records[name].arrow_type
                in_range = (field >= pa.scalar(b.lo, type=t)) & (field <= pa.scalar(b.hi, type=t))
                out = out & (in_range | field.is_null() if b.nulls else in_range)
        return out

    # -- files ----------------------------------------------------------------------------

    def _read_columns(
        self,
        frag: FragmentRecord,
        names: list[str],
        rows: np.ndarray | None,
        deleted: DeletionRecord | None = None,
    ) -> dict[str, pa.ChunkedArray | pa.Array]:
        """Columns of a fragment: all rows, or only ``rows`` (sorted positions), or with
        ``deleted`` (the fragment's deletion vector; ``rows`` None) all rows but those it
        deletes (plain values read in place are taken from the pages, the others removed
        after the read)."""
        if deleted is not None and rows is not None:
            raise ValueError("_read_columns takes rows or a deletion vector, not both")
        live = None if deleted is None else live_rows(deleted)
        keep = None if live is None else live[1].to_numpy()
        n = frag.row_count if rows is None else len(rows)
        n = n if keep is None else len(keep)
        out: dict[str, pa.ChunkedArray | pa.Array] = {}
        records = {c.name: c for c in self.snapshot.columns}
        ids = [records[c].column_id for c in names if c in records]
        providers = self.snapshot.resolve(frag.fragment_id, ids)
        per_file: dict[str, tuple[FileRecord, list[ColumnRecord]]] = {}
        for name in names:
            if name == APPEND_NAME:
                out[name] = pa.repeat(pa.scalar(frag.batch_name, pa.string()), n)
                continue
            col = records[name]
            provider = providers[col.column_id]
            if provider is None:
                out[name] = pa.nulls(n, col.arrow_type)
                continue
            per_file.setdefault(provider.file_id, (provider, []))[1].append(col)
        jobs = list(per_file.values())
        if rows is None or self._few(frag, rows):  # values read in place need no thread
            jobs = [
                job for job in jobs if not self._gathered(frag, job[0], job[1], rows, out, keep)
            ]
        if len(jobs) > 1:
            tables = list(
                _file_pool().map(
                    lambda job: self._read_file(
                        frag, job[0], [c.physical_name for c in job[1]], rows
                    ),
                    jobs,
                )
            )
        else:
            tables = [
                self._read_file(frag, f, [c.physical_name for c in cs], rows) for f, cs in jobs
            ]
        for (file, cols), table in zip(jobs, tables, strict=True):
            for col in cols:
                arr = table.column(col.physical_name)
                arr = arr if live is None else _drop_deleted(arr, live)
                out[col.name] = self._as_logical(arr, col, file)
        return out

    def _as_logical(
        self, arr: pa.ChunkedArray | pa.Array, col: ColumnRecord, file: FileRecord
    ) -> pa.ChunkedArray | pa.Array:
        """``arr`` (as stored in ``file``) as the catalog's type of ``col``."""
        if arr.type.equals(col.arrow_type):
            return arr
        if self.strict_types and not widens(arr.type, col.arrow_type):
            raise SchemaMismatchError(
                f"Cannot read column '{col.name}' of file {self.location.child_uri(file.path)}: "
                f"it is stored as {arr.type}, the table's type is {col.arrow_type} (schema "
                "drift, not corruption)"
            )
        return arr.cast(col.arrow_type)

    def _few(self, frag: FragmentRecord, rows: np.ndarray) -> bool:
        """Whether ``rows`` are few enough to read by pages (the selectivity setting)."""
        return len(rows) <= self.max_selectivity * frag.row_count

    def _gathered(
        self,
        frag: FragmentRecord,
        file: FileRecord,
        cols: list[ColumnRecord],
        rows: np.ndarray | None,
        out: dict[str, pa.ChunkedArray | pa.Array],
        keep: np.ndarray | None = None,
    ) -> bool:
        """Put ``rows`` (None: all, or with ``keep``, the live offsets, those) of every column
        of ``cols`` into ``out`` when all of them are read in place from ``file``'s pages
        (:func:`omnitable.format.pages.gather_plain`: plain uncompressed values, no
        decoding); whether they were (else ``out`` is unchanged)."""
        if not all(c.arrow_type in _PLAIN_TYPES for c in cols):
            return False  # only such columns can be read in place: no file is opened for it
        uri = self.location.child_uri(file.path)
        if rows is None and not footer_cached(uri) and not read_before(uri):
            return False  # a file read once is read by pyarrow (parsing its footer costs more)
        try:  # not memory-mapped: reading the pages' values costs less than faulting them in
            handle = self._open(file.path, mapped=False)
        except (OSError, pa.ArrowInvalid):
            return False  # the caller's read reports it
        got: dict[str, pa.Array] = {}
        fetched = 0
        with handle:
            for col in cols:
                read = gather_plain(handle, uri, col.physical_name, rows if keep is None else keep)
                if read is None or read.file_rows != frag.row_count:
                    return False
                got[col.name] = self._as_logical(read.table.column(0), col, file)
                fetched += read.bytes_read
        out.update(got)
        with self._lock:
            self._files_opened += 1
            self._bytes += fetched
        return True

    def _read_file(
        self, frag: FragmentRecord, file: FileRecord, physical: list[str], rows: np.ndarray | None
    ) -> pa.Table:
        few = rows is not None and self._few(frag, rows)
        paged: dict[str, pa.ChunkedArray] = {}
        try:
            handle = self._open(file.path, mapped=few)
            if few and rows is not None:
                paged = self._read_pages(handle, frag, file, physical, rows)
                if len(paged) == len(physical):
                    return pa.Table.from_arrays([paged[p] for p in physical], names=physical)
            pf = pq.ParquetFile(handle)
        except (OSError, pa.ArrowInvalid) as exc:
            raise CorruptInputError(
                f"Cannot read column file {self.location.child_uri(file.path)} of fragment "
                f"{frag.fragment_id}: {exc}",
                file.path,
            ) from exc
        if not paged:
            with self._lock:
                self._files_opened += 1
        meta = pf.metadata
        if meta.num_rows != frag.row_count:
            raise CorruptInputError(
                f"Cannot read fragment {frag.fragment_id}: file {file.path} has {meta.num_rows} "
                f"rows, the fragment has {frag.row_count} (alignment invariant broken)",
                file.path,
            )
        rest = [p for p in physical if p not in paged]
        table = self._read_row_groups(pf, rest, rows, few)
        arrays = [paged[p] if p in paged else table.column(p) for p in physical]
        return pa.Table.from_arrays(arrays, names=physical)

    def _open(self, path: str, mapped: bool) -> pa.NativeFile:
        """A reader of the column file ``path``; for a selective read of a local file, a
        reader of the map the process keeps of it (``fs.mapped_file``: the page reader then
        takes the pages it decodes from the OS's cache without a read of each span of them,
        ~30 % of a 1 % read of a text column, and a file read again is not mapped again)."""
        full = self.location.child_path(path)
        if mapped and isinstance(self.location.fs, pafs.LocalFileSystem):
            return mapped_file(full)
        return self.location.fs.open_input_file(full)

    def _read_pages(
        self,
        handle: pa.NativeFile,
        frag: FragmentRecord,
        file: FileRecord,
        physical: list[str],
        rows: np.ndarray,
    ) -> dict[str, pa.ChunkedArray]:
        """The columns of ``physical`` whose pages holding ``rows`` are worth reading alone,
        each read on its own (a narrow column's large pages do not widen a wide one's; plain
        uncompressed values taken in place)."""
        uri = self.location.child_uri(file.path)
        out: dict[str, pa.ChunkedArray] = {}
        fetched = 0
        for name in physical:
            got = (
                gather_plain(handle, uri, name, rows)
                or gather_dictionary(handle, uri, name, rows)
                or gather_strings(handle, uri, name, rows)
                or read_pages(handle, uri, [name], rows)
            )
            if got is not None and got.file_rows == frag.row_count:
                out[name] = got.table.column(0)
                fetched += got.bytes_read
        if out:
            with self._lock:
                self._files_opened += 1
                self._bytes += fetched
        return out

    def _read_row_groups(
        self, pf: pq.ParquetFile, physical: list[str], rows: np.ndarray | None, few: bool
    ) -> pa.Table:
        """``physical`` columns of all rows, or of ``rows`` (decoding only the row groups
        holding them when ``few``)."""
        meta = pf.metadata
        indices = [pf.schema_arrow.get_field_index(p) for p in physical]
        if rows is None or not few:
            table = pf.read(columns=physical, use_threads=True)
            self._count_bytes(meta, range(meta.num_row_groups), indices)
            return table if rows is None else table.take(pa.array(rows))
        starts = np.zeros(meta.num_row_groups + 1, dtype=np.int64)
        for i in range(meta.num_row_groups):
            starts[i + 1] = starts[i] + meta.row_group(i).num_rows
        groups = np.unique(np.searchsorted(starts, rows, side="right") - 1)
        table = pf.read_row_groups([int(g) for g in groups], columns=physical, use_threads=True)
        self._count_bytes(meta, groups, indices)
        # position of each wanted row inside the concatenation of the selected row groups
        offsets = np.zeros(meta.num_row_groups, dtype=np.int64)
        acc = 0
        for g in groups:
            offsets[g] = acc - starts[g]
            acc += int(starts[g + 1] - starts[g])
        rg_of_row = np.searchsorted(starts, rows, side="right") - 1
        return table.take(pa.array(rows + offsets[rg_of_row]))

    def _count_bytes(
        self, meta: pq.FileMetaData, groups: Iterable[int], indices: list[int]
    ) -> None:
        total = 0
        leaf_names = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]
        wanted = {meta.schema.to_arrow_schema().field(i).name for i in indices}
        for g in groups:
            rg = meta.row_group(int(g))
            for ci in range(rg.num_columns):
                if leaf_names[ci] in wanted:
                    total += rg.column(ci).total_compressed_size
        with self._lock:
            self._bytes += total
