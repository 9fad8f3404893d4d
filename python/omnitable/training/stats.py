"""``Table.stats``: per-column statistics of one snapshot (docs/training.md "Statistics").

Count, null count, min and max come from the catalog's per-file statistics without opening a
data file. Where those cannot give the exact figure — a fragment with a deletion vector (its
file statistics still count the deleted rows), a file without statistics for the column, a
float column holding NaN or a string too long to keep bounds for — only those fragments are
read, so the figures are always exact. Mean, standard deviation (sample, as pandas),
quantiles, a histogram and the distinct count need the values: the first access to any of them
scans the columns once (the Python zip reader, pyarrow compute and numpy, fragment by fragment)
and keeps the result. Quantiles and distinct counts are approximate by default (sketches.py: a
uniform t-digest, exact up to 2,048 values; exact up to 50,000 distinct values, then
HyperLogLog, about 0.8 % error) and exact with
``exact=True`` (which keeps each column's values in memory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.records import ColumnRecord, FileRecord, FragmentRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import UnknownColumnError, ValidationError
from omnitable.format.fs import Location
from omnitable.format.reader import FragmentReader
from omnitable.training.sketches import DistinctSketch, Moments, QuantileSketch, hash_values
from omnitable.vocabulary.names import SYSTEM_COLUMNS
from omnitable.vocabulary.stats import decode_value

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
"""The quantiles reported by default."""


def is_numeric(t: pa.DataType) -> bool:
    """Whether mean, std, quantiles and histograms apply (integers, floats, decimals, bools)."""
    return (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        or pa.types.is_boolean(t)
    )  # fmt: skip


def numeric_values(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The non-null, non-NaN values as float64."""
    arr = pc.drop_null(values)
    if not pa.types.is_floating(arr.type) and not pa.types.is_decimal(arr.type):
        arr = arr.cast(pa.int64())
    out = np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    return out[~np.isnan(out)]


@dataclass
class _Meta:
    """Count, nulls and bounds of one column over the fragments the metadata answers."""

    count: int = 0
    nulls: int = 0
    lo: Any = None
    hi: Any = None

    def bound(self, lo: Any, hi: Any) -> None:
        if lo is None:
            return
        self.lo = lo if self.lo is None or lo < self.lo else self.lo
        self.hi = hi if self.hi is None or hi > self.hi else self.hi

    def add_values(self, values: pa.ChunkedArray | pa.Array) -> None:
        nulls = int(values.null_count)
        self.nulls += nulls
        self.count += len(values) - nulls
        if len(values) == nulls or not _orderable(values.type):
            return
        if pa.types.is_floating(values.type):
            values = pc.filter(values, pc.invert(pc.is_nan(values)))
        mm = pc.min_max(values)
        self.bound(mm["min"].as_py(), mm["max"].as_py())


def _orderable(t: pa.DataType) -> bool:
    return (
        is_numeric(t) or pa.types.is_string(t) or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
    )  # fmt: skip


@dataclass
class _Scan:
    """Accumulators of one column's scan."""

    numeric: bool
    exact: bool
    bins: int
    edges: np.ndarray | None
    moments: Moments = field(default_factory=Moments)
    sketch: QuantileSketch = field(default_factory=QuantileSketch)
    distinct: DistinctSketch = field(default_factory=DistinctSketch)
    kept: list[np.ndarray] = field(default_factory=list)
    uniques: list[pa.Array] = field(default_factory=list)
    counts: np.ndarray | None = None
    hashable: bool = True
    distinct_wanted: bool = True

    def add(self, values: pa.ChunkedArray) -> None:
        if self.numeric:
            v = numeric_values(values)
            self.moments.add(v)
            if self.exact:
                self.kept.append(v)
            else:
                self.sketch.add(v)
            if self.edges is not None:
                c, _ = np.histogram(v, bins=self.edges)
                self.counts = c if self.counts is None else self.counts + c
        if not self.distinct_wanted:
            self.hashable = False
            return
        if self.exact:
            try:
                self.uniques.append(pc.unique(pc.drop_null(values).combine_chunks()))
            except pa.ArrowNotImplementedError:
                self.hashable = False
            return
        hashes = hash_values(values)
        if hashes is None:
            self.hashable = False
        else:
            self.distinct.add(hashes)

    def distinct_count(self) -> int | None:
        if not self.hashable:
            return None
        if not self.exact:
            return self.distinct.estimate()
        if not self.uniques:
            return 0
        return len(pc.unique(pa.concat_arrays(self.uniques)))

    def quantiles(self, qs: tuple[float, ...]) -> list[float | None]:
        if not self.numeric:
            return [None] * len(qs)
        if self.exact:
            values = np.concatenate(self.kept) if self.kept else np.empty(0)
            if len(values) == 0:
                return [None] * len(qs)
            return [float(x) for x in np.quantile(values, qs)]
        return self.sketch.quantiles(list(qs))


@dataclass(frozen=True)
class ColumnSummary:
    """What the scan adds for one column (None where it does not apply)."""

    mean: float | None
    std: float | None
    quantiles: dict[float, float | None]
    histogram: tuple[list[float], list[int]] | None
    distinct: int | None
    population_std: float | None = None  # ddof=0 (what standardize divides by)


class ColumnStatistics:
    """Statistics of one column. ``count`` (non-null values), ``null_count``, ``min``, ``max``
    are exact and known without a scan; ``mean``, ``std``, ``quantiles``, ``histogram``
    (``(edges, counts)``, equal-width bins over [min, max]) and ``distinct`` scan once on first
    access (for every column of the result)."""

    def __init__(self, parent: TableStatistics, column: ColumnRecord, meta: _Meta) -> None:
        self._parent = parent
        self.name = column.name
        self.type = column.arrow_type
        self.count = meta.count
        self.null_count = meta.nulls
        self.min = meta.lo
        self.max = meta.hi

    def _summary(self) -> ColumnSummary:
        return self._parent.summary(self.name)

    @property
    def mean(self) -> float | None:
        return self._summary().mean

    @property
    def std(self) -> float | None:
        return self._summary().std

    @property
    def population_std(self) -> float | None:
        """The standard deviation with ``ddof=0`` (what ``standardize`` divides by)."""
        return self._summary().population_std

    @property
    def quantiles(self) -> dict[float, float | None]:
        return self._summary().quantiles

    @property
    def histogram(self) -> tuple[list[float], list[int]] | None:
        return self._summary().histogram

    @property
    def distinct(self) -> int | None:
        return self._summary().distinct

    def __repr__(self) -> str:
        return (
            f"ColumnStatistics({self.name}: count={self.count}, nulls={self.null_count}, "
            f"min={self.min!r}, max={self.max!r})"
        )


class TableStatistics:
    """Per-column statistics of one snapshot: ``stats["col"]``, ``stats.columns``,
    ``stats.rows`` (live rows), ``stats.version``, ``stats.files_opened`` (data files read so
    far: 0 when the metadata answered everything), :meth:`to_pandas`."""

    def __init__(
        self,
        reader: FragmentReader,
        columns: list[ColumnRecord],
        metas: dict[str, _Meta],
        rows: int,
        *,
        exact: bool,
        bins: int,
        quantiles: tuple[float, ...],
        distinct: bool = True,
    ) -> None:
        self._reader = reader
        self._distinct = distinct
        self._records = columns
        self.version = reader.snapshot.version
        self.rows = rows
        self.exact = exact
        self.bins = bins
        self.quantile_levels = quantiles
        self._columns = {c.name: ColumnStatistics(self, c, metas[c.name]) for c in columns}
        self._summaries: dict[str, ColumnSummary] | None = None

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    @property
    def files_opened(self) -> int:
        return self._reader._files_opened

    def __getitem__(self, name: str) -> ColumnStatistics:
        if name not in self._columns:
            raise UnknownColumnError(
                f"No statistics for column '{name}'; these have some: {', '.join(self._columns)}"
            )
        return self._columns[name]

    def __iter__(self) -> Iterator[ColumnStatistics]:
        return iter(self._columns.values())

    def summary(self, name: str) -> ColumnSummary:
        """The scanned statistics of ``name`` (scans every column of the result the first
        time)."""
        if self._summaries is None:
            self._summaries = self._scan()
        return self._summaries[name]

    def _scan(self) -> dict[str, ColumnSummary]:
        accs: dict[str, _Scan] = {}
        for c in self._records:
            st = self._columns[c.name]
            numeric = is_numeric(c.arrow_type)
            edges = None
            if numeric and st.min is not None:
                lo, hi = float(st.min), float(st.max)
                edges = np.linspace(lo, hi, self.bins + 1) if hi > lo else np.array([lo, lo + 1])
            accs[c.name] = _Scan(numeric, self.exact, self.bins, edges)
            accs[c.name].distinct_wanted = self._distinct
        names = [c.name for c in self._records]
        for table in _fragments(self._reader, self._reader.snapshot.live_fragments(None), names):
            for name in names:
                accs[name].add(table.column(name))
        return {name: _summarize(acc, self.quantile_levels) for name, acc in accs.items()}

    def to_pandas(self, scan: bool = True) -> Any:
        """One row per column: type, count, null_count, min, max and (``scan``: the default)
        mean, std, distinct, one ``q<level>`` column per quantile, histogram edges and counts."""
        import pandas as pd

        rows = []
        for st in self:
            row: dict[str, Any] = {"column": st.name, "type": str(st.type), "count": st.count,
                                   "null_count": st.null_count, "min": st.min, "max": st.max}  # fmt: skip
            if scan:
                s = st._summary()
                row.update(mean=s.mean, std=s.std, distinct=s.distinct)
                row.update({f"q{q:g}": v for q, v in s.quantiles.items()})
                row["histogram_edges"] = None if s.histogram is None else s.histogram[0]
                row["histogram_counts"] = None if s.histogram is None else s.histogram[1]
            rows.append(row)
        return pd.DataFrame(rows).set_index("column")


def _summarize(acc: _Scan, qs: tuple[float, ...]) -> ColumnSummary:
    numeric = acc.numeric and acc.moments.count > 0
    hist = None
    if acc.edges is not None:
        counts = acc.counts if acc.counts is not None else np.zeros(len(acc.edges) - 1, np.int64)
        hist = ([float(e) for e in acc.edges], [int(c) for c in counts])
    return ColumnSummary(
        mean=acc.moments.mean if numeric else None,
        std=acc.moments.std() if numeric else None,
        quantiles=dict(zip(qs, acc.quantiles(qs), strict=True)),
        histogram=hist,
        distinct=acc.distinct_count(),
        population_std=acc.moments.std(ddof=0) if numeric else None,
    )


def _fragments(
    reader: FragmentReader, fragments: list[FragmentRecord], names: list[str]
) -> Iterator[pa.Table]:
    """The live rows of each fragment (columns ``names``), a few fragments read at a time."""
    workers = max(2, (os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i in range(0, len(fragments), 2 * workers):
            window = fragments[i : i + 2 * workers]
            yield from pool.map(lambda f: reader.read_fragment(f, names), window)


def check_columns(snap: Snapshot, columns: list[str] | None, action: str) -> list[ColumnRecord]:
    """The user columns named (None: all of them), in that order.

    Raises:
        ValidationError: not a list of names, a system column, duplicates.
        UnknownColumnError: a name that is not a column of the snapshot.
    """
    if columns is None:
        return list(snap.user_columns)
    if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
        raise ValidationError(f"Cannot {action}: columns must be a list of names, got {columns!r}")
    if len(set(columns)) != len(columns):
        raise ValidationError(f"Cannot {action}: columns {list(columns)} contain duplicates")
    out = []
    for name in columns:
        if name in SYSTEM_COLUMNS:
            raise ValidationError(f"Cannot {action}: '{name}' is a system column")
        if not snap.has_column(name):
            raise UnknownColumnError(
                f"Cannot {action}: table '{snap.table.name}' has no column '{name}'; columns "
                f"are: {', '.join(c.name for c in snap.user_columns)}"
            )
        out.append(snap.column(name))
    return out


def table_stats(
    location: Location,
    snap: Snapshot,
    columns: list[str] | None,
    *,
    exact: bool = False,
    bins: int = 20,
    quantiles: tuple[float, ...] = QUANTILES,
    distinct: bool = True,
) -> TableStatistics:
    """Statistics of ``columns`` (None: every user column) of ``snap`` (loaded with their files
    and statistics); ``distinct=False``: no distinct counts (None), a cheaper scan.

    Raises:
        ValidationError, UnknownColumnError: bad columns, bins or quantiles.
    """
    records = check_columns(snap, columns, "compute statistics")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValidationError(
            f"Cannot compute statistics: bins must be a positive int, got {bins!r}"
        )
    levels = tuple(quantiles)
    if not levels or any(not isinstance(q, (int, float)) or not 0 <= q <= 1 for q in levels):
        raise ValidationError(
            f"Cannot compute statistics: quantiles must be numbers in [0, 1], got {quantiles!r}"
        )
    reader = FragmentReader(location, snap)
    metas = {c.name: _Meta() for c in records}
    rows = 0
    unanswered: dict[str, list[str]] = {}  # fragment id -> columns the metadata cannot answer
    fragments = snap.live_fragments(None)
    entries: dict[str, list[Any] | None] = {}
    for frag in fragments:
        live = snap.live_rows(frag)
        rows += live
        deleted = live != frag.row_count
        providers = snap.resolve(frag.fragment_id, [c.column_id for c in records])
        for col in records:
            provider = providers[col.column_id]
            if provider is None:  # no file provides it: NULL in every row
                metas[col.name].nulls += live
            elif deleted or not _answer(metas[col.name], col, provider, frag, entries):
                unanswered.setdefault(frag.fragment_id, []).append(col.name)
    by_id = {f.fragment_id: f for f in fragments}
    for fid, names in unanswered.items():
        table = reader.read_fragment(by_id[fid], names)
        for name in names:
            metas[name].add_values(table.column(name))
    return TableStatistics(reader, records, metas, rows, exact=exact, bins=bins, quantiles=levels)


def _answer(
    meta: _Meta,
    col: ColumnRecord,
    file: FileRecord,
    frag: FragmentRecord,
    entries: dict[str, list[Any] | None],
) -> bool:
    """Add the file's statistics of ``col`` to ``meta``; False when they do not give exact
    figures (no statistics recorded, or no bounds where the column has values)."""
    if file.file_id not in entries:
        entries[file.file_id] = None if file.stats_json is None else json.loads(file.stats_json)
    raw = entries[file.file_id]
    if raw is None:
        return False
    entry = raw[file.columns[col.column_id].position]
    if entry is None or entry[0] is None:
        return False
    nulls, lo, hi = int(entry[0]), entry[1], entry[2]
    values = frag.row_count - nulls
    if values > 0 and (lo is None or hi is None) and _orderable(col.arrow_type):
        return False  # NaN in a float column, or strings too long for bounds
    meta.nulls += nulls
    meta.count += values
    if values > 0 and lo is not None and hi is not None:
        t = col.arrow_type
        meta.bound(decode_value(lo, t), decode_value(hi, t))
    return True
