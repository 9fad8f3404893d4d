"""Fitted preprocessing: parameters fitted on one snapshot, stored in the catalog, applied to
batches at training and inference time (docs/training.md "Fitted preprocessing").

A spec maps a column to an operation (a name, or a dict with ``op`` and its options):

* ``standardize``: ``(x - mean) / std`` (population std; 1 when it is 0), float32.
* ``min_max``: ``(x - min) / (max - min)`` (0 when max == min), float32; not clipped.
* ``vocabulary`` (``top_k``: None for all, ``min_count``: 1): the index of the value among the
  ``top_k`` most frequent (ties by value), int64; other values and NULL get ``len(values)``.
* ``one_hot``: the vocabulary index as a float32 one-hot vector of ``len(values) + 1`` entries
  (the last: out of vocabulary).
* ``bucketize`` (``boundaries``: sorted numbers, or ``num_buckets``: quantile boundaries): the
  bucket index ``searchsorted(boundaries, x, side="right")``, int64; NULL/NaN get
  ``len(boundaries) + 1``.

NULL (and NaN) become 0.0 after ``standardize`` and ``min_max``. The record lives in the
existing ``omnitable_meta`` table under ``preprocess:<table_id>:<name>`` (the catalog schema is
not changed for it): JSON with the snapshot version and branch, and per column its column id,
type, operation and parameters. Loading it checks every column still exists at the table's head
with the same id, name and type.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import text

from omnitable.catalog.records import ColumnRecord
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import NotFoundError, SchemaMismatchError, ValidationError
from omnitable.format.reader import FragmentReader
from omnitable.training.sketches import Moments, QuantileSketch
from omnitable.training.stats import (
    _fragments,
    check_columns,
    is_numeric,
    numeric_values,
    table_stats,
)

OPS = ("standardize", "min_max", "vocabulary", "one_hot", "bucketize")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_NUMERIC_OPS = {"standardize", "min_max", "bucketize"}
_OPTIONS = {
    "standardize": set(), "min_max": set(), "vocabulary": {"top_k", "min_count"},
    "one_hot": {"top_k", "min_count"}, "bucketize": {"boundaries", "num_buckets"},
}  # fmt: skip


@dataclass(frozen=True)
class FittedColumn:
    """One column's fitted transformation."""

    name: str
    column_id: int
    data_type: str
    op: str
    params: dict[str, Any]

    def to_doc(self) -> dict[str, Any]:
        return {"column_id": self.column_id, "type": self.data_type, "op": self.op,
                "params": self.params}  # fmt: skip


class FittedPreprocessor:
    """Fitted parameters of a spec; :meth:`apply` (or calling it) transforms a batch."""

    def __init__(
        self, name: str, table: str, version: int, branch: str, columns: list[FittedColumn],
        fitted_at: str,
    ) -> None:  # fmt: skip
        self.name = name
        self.table = table
        self.version = version
        self.branch = branch
        self.columns = {c.name: c for c in columns}
        self.fitted_at = fitted_at

    def __repr__(self) -> str:
        ops = ", ".join(f"{c.name}: {c.op}" for c in self.columns.values())
        return f"FittedPreprocessor({self.name!r} of {self.table}@{self.version}: {ops})"

    def params(self, column: str) -> dict[str, Any]:
        """The fitted parameters of ``column`` (a copy)."""
        return dict(self.columns[column].params)

    def to_json(self) -> str:
        doc = {"name": self.name, "table": self.table, "version": self.version,
               "branch": self.branch, "fitted_at": self.fitted_at,
               "columns": {n: c.to_doc() for n, c in self.columns.items()}}  # fmt: skip
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> FittedPreprocessor:
        doc = json.loads(raw)
        cols = [
            FittedColumn(n, int(c["column_id"]), str(c["type"]), str(c["op"]), dict(c["params"]))
            for n, c in doc["columns"].items()
        ]
        return cls(doc["name"], doc["table"], int(doc["version"]), doc["branch"], cols,
                   doc["fitted_at"])  # fmt: skip

    def __call__(self, batch: Any) -> Any:
        return self.apply(batch)

    def apply(self, batch: Any) -> Any:
        """``batch`` with each fitted column replaced by its transformed values (other columns
        unchanged), of the same kind: a pyarrow RecordBatch or Table, or a dict of numpy arrays
        (NaN: missing). Vectorized; safe to use as a loader's ``transform=``.

        Raises:
            ValidationError: not a batch, a fitted column missing, an unusable column type.
        """
        if isinstance(batch, (pa.RecordBatch, pa.Table)):
            arrays = {n: batch.column(n) for n in batch.schema.names}
        elif isinstance(batch, Mapping):
            arrays = dict(batch)
        else:
            raise ValidationError(
                f"Cannot apply preprocessing '{self.name}': give a pyarrow RecordBatch or Table "
                f"or a dict of numpy arrays, got {type(batch).__name__}"
            )
        missing = [n for n in self.columns if n not in arrays]
        if missing:
            raise ValidationError(
                f"Cannot apply preprocessing '{self.name}': the batch has no column(s) "
                f"{', '.join(missing)}; it has {', '.join(map(str, arrays))}"
            )
        as_arrow = not isinstance(batch, Mapping)
        out = dict(arrays)
        for name, col in self.columns.items():
            out[name] = _transform(self.name, col, arrays[name], as_arrow)
        if isinstance(batch, pa.RecordBatch):
            return pa.RecordBatch.from_pydict(out)
        if isinstance(batch, pa.Table):
            return pa.Table.from_pydict(out)
        return out


def _transform(spec: str, col: FittedColumn, values: Any, as_arrow: bool) -> Any:
    p = col.params
    if col.op in _NUMERIC_OPS:
        x = _floats(spec, col, values)
        missing = np.isnan(x)
        if col.op == "standardize":
            y = ((x - p["mean"]) / p["std"]).astype(np.float32)
        elif col.op == "min_max":
            span = p["max"] - p["min"]
            y = ((x - p["min"]) / span if span > 0 else np.zeros_like(x)).astype(np.float32)
        else:
            b = np.asarray(p["boundaries"], dtype=np.float64)
            y = np.searchsorted(b, x, side="right").astype(np.int64)
            y[missing] = len(b) + 1
            return pa.array(y) if as_arrow else y
        y[missing] = 0.0
        return pa.array(y) if as_arrow else y
    index = _vocab_index(spec, col, values)
    if col.op == "vocabulary":
        return pa.array(index) if as_arrow else index
    width = len(p["values"]) + 1
    onehot = np.zeros((len(index), width), dtype=np.float32)
    onehot[np.arange(len(index)), index] = 1.0
    if not as_arrow:
        return onehot
    return pa.FixedSizeListArray.from_arrays(pa.array(onehot.reshape(-1)), width)


def _floats(spec: str, col: FittedColumn, values: Any) -> np.ndarray:
    """float64 values, NaN where missing."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if not is_numeric(values.type):
            raise ValidationError(
                f"Cannot apply preprocessing '{spec}': column '{col.name}' ({col.op}) must be "
                f"numeric, the batch has {values.type}"
            )
        if pa.types.is_boolean(values.type):
            values = values.cast(pa.int64())
        return np.asarray(values.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise ValidationError(
            f"Cannot apply preprocessing '{spec}': column '{col.name}' ({col.op}) must be "
            f"numeric, the batch has dtype {arr.dtype}"
        )
    return arr.astype(np.float64)


def _vocab_index(spec: str, col: FittedColumn, values: Any) -> np.ndarray:
    vocab = col.params["values"]
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = np.asarray(values)
        values = pa.array(arr, from_pandas=arr.dtype.kind == "f")
    try:
        value_set = pa.array(vocab, type=values.type) if vocab else pa.array([], values.type)
        found = pc.index_in(values, value_set=value_set)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValidationError(
            f"Cannot apply preprocessing '{spec}': column '{col.name}' ({col.op}, fitted on "
            f"{col.data_type}) cannot be looked up in a batch of {values.type}: {exc}"
        ) from exc
    return np.asarray(pc.fill_null(found, len(vocab)).to_numpy(zero_copy_only=False), np.int64)


# -- fitting ----------------------------------------------------------------------------------


def parse_spec(snap: Snapshot, spec: Any) -> list[tuple[ColumnRecord, str, dict[str, Any]]]:
    """(column, op, options) per spec entry, checked against the snapshot.

    Raises:
        ValidationError, UnknownColumnError: what is wrong and how to write it.
    """
    if not isinstance(spec, Mapping) or not spec:
        raise ValidationError(
            "Cannot fit preprocessing: spec must be a non-empty dict of column -> op, e.g. "
            f"{{'age': 'standardize', 'city': {{'op': 'vocabulary', 'top_k': 100}}}}; got {spec!r}"
        )
    records = check_columns(snap, list(spec), "fit preprocessing")
    out = []
    for col in records:
        entry = spec[col.name]
        options = {"op": entry} if isinstance(entry, str) else dict(entry)
        op = options.pop("op", None)
        if op not in OPS:
            raise ValidationError(
                f"Cannot fit preprocessing of column '{col.name}': op must be one of "
                f"{', '.join(OPS)}, got {op!r}"
            )
        unknown = set(options) - _OPTIONS[op]
        if unknown:
            raise ValidationError(
                f"Cannot fit {op} of column '{col.name}': unknown option(s) {sorted(unknown)}; "
                f"it takes {sorted(_OPTIONS[op]) or 'none'}"
            )
        _check_op(col, op, options)
        out.append((col, op, options))
    return out


def _check_op(col: ColumnRecord, op: str, options: dict[str, Any]) -> None:
    t = col.arrow_type
    if op in _NUMERIC_OPS and not is_numeric(t):
        raise ValidationError(f"Cannot fit {op} of column '{col.name}': it is {t}, not numeric")
    if op in ("vocabulary", "one_hot"):
        if not (pa.types.is_string(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)):
            raise ValidationError(
                f"Cannot fit {op} of column '{col.name}': it is {t}; a vocabulary holds "
                "strings, integers or booleans"
            )
        for key in ("top_k", "min_count"):
            v = options.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValidationError(
                    f"Cannot fit {op} of column '{col.name}': {key} must be a positive int, "
                    f"got {v!r}"
                )
    if op == "bucketize":
        b, n = options.get("boundaries"), options.get("num_buckets")
        if (b is None) == (n is None):
            raise ValidationError(
                f"Cannot fit bucketize of column '{col.name}': give boundaries (a sorted list "
                "of numbers) or num_buckets (an int >= 2), exactly one"
            )
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 2):
            raise ValidationError(f"Cannot fit bucketize of '{col.name}': num_buckets {n!r} < 2")
        if b is not None:
            ok = isinstance(b, (list, tuple)) and len(b) > 0 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in b
            )  # fmt: skip
            if not ok or list(b) != sorted(b):
                raise ValidationError(
                    f"Cannot fit bucketize of '{col.name}': boundaries must be a non-empty "
                    f"sorted list of numbers, got {b!r}"
                )


def fit(ctx: TableContext, snap: Snapshot, spec: Any, name: str) -> FittedPreprocessor:
    """Fit ``spec`` on ``snap`` (loaded with statistics) and store it as ``name``: ``min_max``
    from the catalog's statistics (Table.stats), the other ops by one scan of their columns.

    Raises:
        ValidationError, UnknownColumnError: a bad spec or name.
    """
    check_name(name, "fit preprocessing")
    entries = parse_spec(snap, spec)
    bounded = [c.name for c, op, _ in entries if op == "min_max"]
    stats = {st.name: st for st in table_stats(ctx.location, snap, bounded, distinct=False)}
    scan = _FitScan(entries)
    if scan.names:
        reader = FragmentReader(ctx.location, snap)
        for table in _fragments(reader, snap.live_fragments(None), scan.names):
            scan.add(table)
    fitted = []
    for col, op, options in entries:
        if op == "min_max":
            st = stats[col.name]
            if st.min is None:
                raise ValidationError(f"Cannot fit min_max of column '{col.name}': no values")
            params: dict[str, Any] = {"min": float(st.min), "max": float(st.max)}
        else:
            params = scan.params(col.name, op, options)
        fitted.append(FittedColumn(col.name, col.column_id, col.data_type, op, params))
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out = FittedPreprocessor(name, ctx.name, snap.version, snap.branch or ctx.branch, fitted, now)
    save(ctx, out)
    return out


class _FitScan:
    """What one scan accumulates per column: moments (standardize), a quantile sketch
    (bucketize by ``num_buckets``), value counts (vocabulary, one_hot)."""

    def __init__(self, entries: list[tuple[ColumnRecord, str, dict[str, Any]]]) -> None:
        self.moments = {c.name: Moments() for c, op, _ in entries if op == "standardize"}
        self.sketches = {c.name: QuantileSketch() for c, _, o in entries if "num_buckets" in o}
        self.counts: dict[str, dict[Any, int]] = {
            c.name: {} for c, op, _ in entries if op in ("vocabulary", "one_hot")
        }
        self.names = [*self.moments, *self.sketches, *self.counts]

    def add(self, table: pa.Table) -> None:
        for name, moments in self.moments.items():
            moments.add(numeric_values(table.column(name)))
        for name, sketch in self.sketches.items():
            sketch.add(numeric_values(table.column(name)))
        for name, acc in self.counts.items():
            vc = pc.value_counts(pc.drop_null(table.column(name)))
            for v, c in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(),
                            strict=True):  # fmt: skip
                acc[v] = acc.get(v, 0) + c

    def params(self, name: str, op: str, options: dict[str, Any]) -> dict[str, Any]:
        if op == "standardize":
            m = self.moments[name]
            if m.count == 0:
                raise ValidationError(f"Cannot fit standardize of column '{name}': no values")
            std0 = m.std(ddof=0) or 0.0
            return {"mean": float(m.mean), "std": float(std0) if std0 > 0 else 1.0}
        if op == "bucketize":
            if "boundaries" in options:
                return {"boundaries": [float(b) for b in options["boundaries"]]}
            n = options["num_buckets"]
            bounds = self.sketches[name].quantiles([i / n for i in range(1, n)])
            if any(b is None for b in bounds):
                raise ValidationError(f"Cannot fit bucketize of column '{name}': no values")
            return {"boundaries": sorted({float(b) for b in bounds if b is not None})}
        found = self.counts[name]
        keep = [(v, c) for v, c in found.items() if c >= options.get("min_count", 1)]
        keep.sort(key=lambda vc: (-vc[1], vc[0]))
        top_k = options.get("top_k")
        values = [v for v, _ in (keep if top_k is None else keep[:top_k])]
        return {"values": values, "counts": [found[v] for v in values]}


# -- the catalog record ------------------------------------------------------------------------


def check_name(name: Any, action: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationError(
            f"Cannot {action}: name must be 1-128 letters, digits, '_', '.', '-' (starting "
            f"with a letter or digit), got {name!r}"
        )
    return name


def meta_key(table_id: str, name: str) -> str:
    return f"preprocess:{table_id}:{name}"


def save(ctx: TableContext, fitted: FittedPreprocessor) -> None:
    """Store (or replace) the record of ``fitted`` under its name."""
    key = meta_key(ctx.record.table_id, fitted.name)
    with ctx.catalog.store.write() as conn:
        conn.execute(text("DELETE FROM omnitable_meta WHERE key = :k"), {"k": key})
        conn.execute(
            text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
            {"k": key, "v": fitted.to_json()},
        )


def load(ctx: TableContext, name: str) -> FittedPreprocessor:
    """The stored preprocessor ``name``, checked against the table's head schema.

    Raises:
        NotFoundError: none of that name.
        SchemaMismatchError: a fitted column was retired, renamed or changed type since.
    """
    check_name(name, "load preprocessing")
    raw = ctx.catalog.store.get_meta(meta_key(ctx.record.table_id, name))
    if raw is None:
        known = ", ".join(list_names(ctx)) or "none"
        raise NotFoundError(
            f"Cannot load preprocessing '{name}' of table '{ctx.name}': not fitted; fitted: {known}"
        )
    fitted = FittedPreprocessor.from_json(raw)
    check_schema(ctx, fitted)
    return fitted


def check_schema(ctx: TableContext, fitted: FittedPreprocessor) -> None:
    """Raise SchemaMismatchError unless every fitted column has, at the head, the same column
    id, name and type as when fitted."""
    snap = ctx.snapshot(scope=SnapshotScope(fragments=False, files=False))
    by_id = {c.column_id: c for c in snap.user_columns}
    problems = []
    for col in fitted.columns.values():
        now = by_id.get(col.column_id)
        if now is None:
            problems.append(f"'{col.name}' was retired or dropped")
        elif now.name != col.name:
            problems.append(f"'{col.name}' was renamed to '{now.name}'")
        elif now.data_type != col.data_type:
            problems.append(f"'{col.name}' changed type from {col.data_type} to {now.data_type}")
    if problems:
        raise SchemaMismatchError(
            f"Cannot use preprocessing '{fitted.name}' of table '{ctx.name}' (fitted at version "
            f"{fitted.version}): the schema changed since: {'; '.join(problems)}; fit it again "
            "with omnitable.preprocess.fit"
        )


def list_names(ctx: TableContext) -> list[str]:
    """Names of the table's stored preprocessors, sorted."""
    prefix = meta_key(ctx.record.table_id, "")
    with ctx.catalog.store.read() as conn:
        keys = conn.execute(
            text("SELECT key FROM omnitable_meta WHERE key LIKE :p"), {"p": prefix + "%"}
        ).scalars()
        return sorted(k[len(prefix) :] for k in keys if k.startswith(prefix))


def delete(ctx: TableContext, name: str) -> None:
    """Remove the stored preprocessor ``name``.

    Raises:
        NotFoundError: none of that name.
    """
    key = meta_key(ctx.record.table_id, check_name(name, "delete preprocessing"))
    with ctx.catalog.store.write() as conn:
        gone = conn.execute(text("DELETE FROM omnitable_meta WHERE key = :k"), {"k": key})
    if gone.rowcount == 0:
        raise NotFoundError(
            f"Cannot delete preprocessing '{name}' of table '{ctx.name}': not fitted"
        )
