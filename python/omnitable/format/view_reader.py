"""Reading a hot column-group view's recorded Parquet files without Spark (``Table.read`` answered
from a fresh view; docs/governance.md "Hot column-group views").

A view's refresh records its Delta version's data files (paths relative to the view directory)
and schema. Those files are plain Parquet that Spark wrote, sorted by the view's first column
per batch, in row groups of at most ``VIEW_ROW_GROUP_ROWS`` rows: :func:`read_view_files` reads
the wanted columns of the row groups whose statistics the filter does not rule out, applies the
filter and gives each column the table column's Arrow type. It answers only what it can answer
exactly as the zip read would: a column stored as another type (types that differ only in
offset width, ``string``/``large_string`` and ``binary``/``large_binary``, are the same values),
a column missing from the files, a file whose footer says Spark rebased its dates or timestamps
to the legacy hybrid calendar (``org.apache.spark.legacy*``: pyarrow would read shifted values),
files that cannot be opened, or a filter that cannot be evaluated gives None, and the caller
reads the table as always.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from omnitable.format.fs import Location
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
    """The rows a view answered (``schema``'s columns, in order), the files it opened and their
    size in bytes (all of each file, not only the row groups read)."""

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
        files = _dataset(location, view)
        if files is None or not set(types) <= set(files.schema.names):
            return None
        # row groups whose statistics rule the filter out are skipped (the files are sorted by
        # the view's first column); NULL counts as false, as in the zip read
        rows = _typed(files.to_table(columns=list(types), filter=where), types)
    except (*ARROW_VALUE_ERRORS, OSError):
        # a filter the zip read evaluates (and reports what is wrong with), or files gone with
        # a view dropped meanwhile: the zip read answers
        return None
    if rows is None:
        return None
    out = pa.Table.from_arrays([rows.column(f.name) for f in schema], schema=schema)
    return ViewRead(out, len(view.files), sum(size for _, size in view.files))


def _dataset(location: Location, view: ViewFiles) -> ds.Dataset | None:
    """The view's files as a dataset, in the order given, kept for the next read of the same
    files (recorded files never change; the dataset keeps their footers, which the statistics
    need); None when a file was written in Spark's legacy hybrid calendar (module docstring)."""
    paths = tuple(location.child_path(f"{view.directory}/{rel}") for rel, _ in view.files)
    key = (location.uri, id(location.fs), paths)  # the cached dataset keeps its filesystem alive
    found, cached = _DATASETS.get(key)
    if found:
        return cached
    files = ds.dataset(list(paths), filesystem=location.fs, format="parquet")
    legacy = any(_legacy(frag.physical_schema) for frag in files.get_fragments())
    made = None if legacy else files
    _DATASETS.put(key, made)
    return made


def _legacy(schema: pa.Schema) -> bool:
    """Whether a Parquet file's footer says Spark wrote its dates or timestamps rebased to the
    legacy hybrid calendar (values only Spark reads back correctly)."""
    return any(k.startswith(b"org.apache.spark.legacy") for k in (schema.metadata or {}))


_DATASETS: Lru[ds.Dataset | None] = Lru(32)  # the datasets of the views read last


def _typed(rows: pa.Table, types: dict[str, pa.DataType]) -> pa.Table | None:
    """``rows`` with each column as its type in ``types`` (None: a column stored as another
    type, module docstring)."""
    arrays = []
    for name in rows.column_names:
        arr, want = rows.column(name), types[name]
        if arr.type.equals(want):
            arrays.append(arr)
        elif any(arr.type in same and want in same for same in _SAME_VALUES):
            arrays.append(arr.cast(want))
        else:
            return None
    return pa.Table.from_arrays(arrays, names=rows.column_names)
