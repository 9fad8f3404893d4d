"""Reading a hot column-group view's recorded Parquet files without Spark (``Table.read`` answered
from a fresh view; docs/governance.md "Hot column-group views").

A view's refresh records its Delta version's data files (paths relative to the view directory)
and schema. Those files are plain Parquet that Spark wrote, each batch's rows sorted by the
view's sort column, in row groups of at most ``VIEW_ROW_GROUP_ROWS`` rows, and they never change:
:func:`read_view_files` keeps their footers (the 1,024 files read last), reads the wanted columns
of the row groups whose statistics the filter does not rule out straight from each file (no
dataset scan: for the few row groups a selective filter leaves, its fixed cost is most of the
read), applies the filter and gives each column the table column's Arrow type. It answers only
what it can answer exactly as the zip read would: a column stored as another type (types that
differ only in offset width, ``string``/``large_string`` and ``binary``/``large_binary``, are the
same values), a column missing from the files, a file whose footer says Spark rebased its dates
or timestamps to the legacy hybrid calendar (``org.apache.spark.legacy*``: pyarrow would read
shifted values), files that cannot be opened, or a filter that cannot be evaluated gives None,
and the caller reads the table as always.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from omnitable.format.fs import Location, mapped_file
from omnitable.format.predicate import Bounds, pruner, survivors
from omnitable.vocabulary.lru import Lru
from omnitable.vocabulary.types import ARROW_VALUE_ERRORS

_SAME_VALUES = [
    {pa.string(), pa.large_string()},
    {pa.binary(), pa.large_binary()},
]


@dataclass(frozen=True)
class ViewFiles:
    """Where a view's recorded files are: ``directory`` relative to the table location,
    ``files`` (path relative to it, bytes) as its refresh recorded them."""

    directory: str
    files: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ViewRead:
    """The rows a view answered (``schema``'s columns, in order), the files it read row groups
    of and the compressed bytes of the column chunks it read."""

    table: pa.Table
    files_opened: int
    bytes_read: int


def read_view_files(
    location: Location,
    view: ViewFiles,
    schema: pa.Schema,
    where: pc.Expression | None,
    where_types: dict[str, pa.DataType],
) -> ViewRead | None:
    """The rows of ``view``'s files where ``where`` holds (NULL counts as false), file by file
    in the order of ``view.files``, as ``schema`` (the zip read's output fields), or None when
    the files cannot answer exactly (module docstring). ``where_types``: the table's type of
    each column ``where`` names (a superset is harmless)."""
    types = {**where_types, **{f.name: f.type for f in schema}}
    if not view.files:
        return ViewRead(schema.empty_table(), 0, 0)
    try:
        files = _opened(location, view)
        if files is None:
            return None
        got = _rows(location, files, types, where, list(where_types))
    except (*ARROW_VALUE_ERRORS, OSError):
        # a filter the zip read evaluates (and reports what is wrong with), or files gone with
        # a view dropped meanwhile: the zip read answers
        return None
    if got is None:
        return None
    out = pa.Table.from_arrays([got.table.column(f.name) for f in schema], schema=schema)
    return ViewRead(out, got.files_opened, got.bytes_read)


@dataclass(frozen=True)
class _ViewFile:
    """One recorded file: its full path, its footer, a fragment over it whose row groups'
    statistics decide which ones a filter may need, its top-level columns' stored types and,
    per row group, the compressed bytes of each top-level column's chunks."""

    path: str
    metadata: pq.FileMetaData
    fragment: ds.ParquetFileFragment
    types: dict[str, pa.DataType]  # each top-level column's Arrow type as stored
    chunk_bytes: tuple[dict[str, int], ...]
    legacy: bool  # written in Spark's legacy hybrid calendar (module docstring)
    _bounds: dict[str, tuple[Bounds, ...]] = field(default_factory=dict, compare=False)

    def bounds(self, name: str) -> tuple[Bounds, ...]:
        """What each row group's statistics say of the flat column ``name`` (worked out once)."""
        found = self._bounds.get(name)
        if found is None:
            found = self._bounds[name] = _row_group_bounds(self.metadata, name)
        return found


def _rows(
    location: Location,
    files: tuple[_ViewFile, ...],
    types: dict[str, pa.DataType],
    where: pc.Expression | None,
    where_names: list[str],
) -> ViewRead | None:
    """``types``' columns of the rows of ``files`` where ``where`` (naming columns among
    ``where_names``) holds, in file order, each as its type in ``types`` (None: a column missing
    from a file or stored as another type). Each file's row groups whose statistics rule
    ``where`` out are skipped, the others read straight from its kept footer: a dataset scan
    costs more than the few row groups a selective filter leaves."""
    names, parts, read_bytes = list(types), [], 0
    if not all(_stored_as(f.types.get(n), t) for f in files for n, t in types.items()):
        return None  # decided before any row group is pruned or read
    check = None
    if where is not None:
        check = pruner(where, {n: types[n] for n in where_names if n in types})
    for file in files:
        groups = _row_groups(file, where, where_names, check, types)
        if not groups:
            continue
        with _source(location, file.path) as source:
            # a remote file's column chunks are fetched together (a local map needs no fetch)
            reader = pq.ParquetFile(source, metadata=file.metadata, pre_buffer=not _local(location))
            read = reader.read_row_groups(groups, columns=names, use_threads=False)
        part = _typed(read, types)
        if part is None:
            return None
        parts.append(part)
        read_bytes += sum(file.chunk_bytes[g][name] for g in groups for name in names)
    rows = pa.concat_tables(parts) if parts else pa.schema(list(types.items())).empty_table()
    return ViewRead(rows if where is None else _filtered(rows, where), len(parts), read_bytes)


def _row_groups(
    file: _ViewFile,
    where: pc.Expression | None,
    where_names: list[str],
    check: Callable[[Mapping[str, Bounds]], bool] | None,
    types: dict[str, pa.DataType],
) -> list[int]:
    """The row groups of ``file`` whose statistics do not rule ``where`` out: by ``check``
    (format/predicate.py ``pruner``, a simple comparison filter, about a microsecond per row
    group) when there is one, else by Arrow's pruning of the fragment (~6 us per row group),
    but only for a filter on columns that cannot hold NaN: Arrow takes every value to lie
    between a row group's min and max, and a NaN, which statistics leave out, does not (it would
    drop a row group where ``x != 0`` holds for a NaN). Otherwise every row group is read."""
    count = file.metadata.num_row_groups
    if where is None:
        return list(range(count))
    if check is not None:
        named = {name: file.bounds(name) for name in where_names}
        return [g for g in range(count) if check({name: b[g] for name, b in named.items()})]
    if all(_nan_free(types[name]) for name in where_names if name in types):
        return [g.id for g in file.fragment.subset(filter=where).row_groups]
    return list(range(count))


def _nan_free(t: pa.DataType) -> bool:
    """Whether no value of type ``t`` (nor of a field nested in it) can be NaN."""
    return not (pa.types.is_floating(t) or pa.types.is_nested(t))


def _filtered(rows: pa.Table, where: pc.Expression) -> pa.Table:
    """The rows where ``where`` holds (NULL counts as false, as in the zip read): by compute
    kernels for a simple comparison filter (format/predicate.py), else through Acero."""
    kept = survivors(where, {name: rows.column(name) for name in rows.column_names})
    return rows.filter(where) if kept is None else rows.take(kept)


def _source(location: Location, path: str) -> pa.NativeFile:
    """A reader of ``path``: over the memory map the process keeps of a local file
    (``fs.mapped_file``: repeated reads of a view neither open nor map it again), else opened
    through the location's filesystem."""
    if _local(location):
        return mapped_file(path)
    return location.fs.open_input_file(path)


def _local(location: Location) -> bool:
    return isinstance(location.fs, pafs.LocalFileSystem)


def _opened(location: Location, view: ViewFiles) -> tuple[_ViewFile, ...] | None:
    """The view's files in the order given, each kept for later reads (recorded files never
    change: a footer, which the statistics need, is read once, and a view refreshed with one
    more batch reads only the new file's); None when a file was written in Spark's legacy
    hybrid calendar (module docstring)."""
    files = []
    for rel, size in view.files:
        path = location.child_path(f"{view.directory}/{rel}")
        key = (location.uri, id(location.fs), path, size)  # the recorded size, as a check
        found, file = _OPENED.get(key)
        if not found or file is None:
            file = _open(location, path)
            _OPENED.put(key, file)
        if file.legacy:
            return None
        files.append(file)
    return tuple(files)


def _open(location: Location, path: str) -> _ViewFile:
    """``path``'s footer and what it says (a file that cannot be read raises OSError)."""
    fragment = _FORMAT.make_fragment(path, filesystem=location.fs)
    fragment.ensure_complete_metadata()
    meta, schema = fragment.metadata, fragment.physical_schema
    types = {f.name: f.type for f in schema}
    return _ViewFile(path, meta, fragment, types, _chunk_bytes(meta, set(types)), _legacy(schema))


def _chunk_bytes(meta: pq.FileMetaData, names: set[str]) -> tuple[dict[str, int], ...]:
    """Per row group, the compressed bytes of each top-level column (of ``names``) in its chunks
    (a nested column's leaves summed: a leaf's path is its column's name, a dot, the rest; column
    names hold no dot, vocabulary/names.py)."""
    owners: list[str | None] = []
    for c in range(meta.num_columns):
        top = meta.schema.column(c).path.split(".", 1)[0]
        owners.append(top if top in names else None)
    out = []
    for g in range(meta.num_row_groups):
        group, sizes = meta.row_group(g), dict.fromkeys(names, 0)
        for c, owner in enumerate(owners):
            if owner is not None:
                sizes[owner] += group.column(c).total_compressed_size
        out.append(sizes)
    return tuple(out)


def _row_group_bounds(meta: pq.FileMetaData, name: str) -> tuple[Bounds, ...]:
    """Per row group, what the statistics of the flat column ``name`` say (predicate.py
    ``Bounds``): min and max (Parquet's leave NULL out; a NaN bound counts as unknown), whether
    some or all values are NULL. A column without statistics is unknown."""
    index = next((c for c in range(meta.num_columns) if meta.schema.column(c).path == name), None)
    out = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = None if index is None else group.column(index).statistics
        if stats is None:
            out.append(Bounds(nulls=True))
            continue
        nulls = not stats.has_null_count or stats.null_count > 0
        if not stats.has_min_max:
            every = (
                stats.has_null_count and group.num_rows > 0 and stats.null_count >= group.num_rows
            )
            out.append(Bounds(all_null=every, nulls=nulls))
            continue
        out.append(Bounds(stats.min, stats.max, nulls=nulls))
    return tuple(out)


def _legacy(schema: pa.Schema) -> bool:
    """Whether a Parquet file's footer says Spark wrote its dates or timestamps rebased to the
    legacy hybrid calendar (values only Spark reads back correctly)."""
    return any(k.startswith(b"org.apache.spark.legacy") for k in (schema.metadata or {}))


_FORMAT = ds.ParquetFileFormat()
_OPENED: Lru[_ViewFile] = Lru(1024)  # the view files read last


def _stored_as(stored: pa.DataType | None, want: pa.DataType) -> bool:
    """Whether a column stored as ``stored`` (None: missing) reads as the values of ``want``."""
    if stored is None:
        return False
    return stored.equals(want) or any(stored in same and want in same for same in _SAME_VALUES)


def _typed(rows: pa.Table, types: dict[str, pa.DataType]) -> pa.Table | None:
    """``rows`` with each column as its type in ``types`` (None: a column stored as another
    type, :func:`_stored_as`; module docstring)."""
    if all(rows.column(name).type.equals(types[name]) for name in rows.column_names):
        return rows
    arrays = []
    for name in rows.column_names:
        arr, want = rows.column(name), types[name]
        if not _stored_as(arr.type, want):
            return None
        arrays.append(arr if arr.type.equals(want) else arr.cast(want))
    return pa.Table.from_arrays(arrays, names=rows.column_names)
