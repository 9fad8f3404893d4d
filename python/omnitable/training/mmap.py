"""Streaming export of numeric columns to flat float32 files a training job memory-maps.

``features.bin`` holds the features row-major (rows x features, float32, native little-endian),
``labels.bin`` the label (rows, float32) when one is given, ``schema.json`` what a reader needs:
columns, dtype, shapes, row count, the exported snapshot and per-feature mean/std for
normalization. One fragment is in memory at a time; the files are written under a temporary
name beside the target and renamed into place, so a crash leaves the target as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.exceptions import AlreadyExistsError, UnknownColumnError, ValidationError
from omnitable.format.reader import FragmentReader

FEATURES_FILE = "features.bin"
LABELS_FILE = "labels.bin"
SCHEMA_FILE = "schema.json"
FORMAT = "omnitable-mmap/1"


@dataclass
class _Moments:
    """Running count, mean and sum of squared deviations per column (Chan's parallel update:
    stable where sum-of-squares is not), NaN (NULL) values skipped."""

    width: int
    count: np.ndarray = field(init=False)
    mean: np.ndarray = field(init=False)
    m2: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.count = np.zeros(self.width, np.int64)
        self.mean = np.zeros(self.width, np.float64)
        self.m2 = np.zeros(self.width, np.float64)

    def add(self, block: np.ndarray) -> None:
        """Fold in ``block`` (rows x width), one column at a time (small temporaries)."""
        for j in range(self.width):
            col = block[:, j]
            col = col[~np.isnan(col)].astype(np.float64)
            n = col.size
            if n == 0:
                continue
            mean = float(col.mean())
            m2 = float(((col - mean) ** 2).sum())
            total = int(self.count[j]) + n
            delta = mean - self.mean[j]
            self.mean[j] += delta * n / total
            self.m2[j] += m2 + delta**2 * self.count[j] * n / total
            self.count[j] = total

    def summary(self, names: list[str], rows: int) -> dict[str, dict[str, Any]]:
        """Per column: mean and population std of the non-NULL values (None when all NULL),
        count of non-NULL values and of NULLs."""
        out = {}
        for i, name in enumerate(names):
            n = int(self.count[i])
            out[name] = {
                "mean": float(self.mean[i]) if n else None,
                "std": float(np.sqrt(self.m2[i] / n)) if n else None,
                "count": n,
                "nulls": rows - n,
            }
        return out


@dataclass(frozen=True)
class MmapExport:
    """What :func:`export_mmap` wrote: the target directory and its ``schema.json`` contents."""

    path: Path
    schema: dict[str, Any]

    @property
    def rows(self) -> int:
        return int(self.schema["rows"])


def export_mmap(
    reader: FragmentReader,
    path: str | os.PathLike[str],
    features: list[str],
    label: str | None = None,
    where: pc.Expression | None = None,
    *,
    overwrite: bool = False,
) -> MmapExport:
    """Write ``features`` (and ``label``) of the live rows of ``reader``'s snapshot matching
    ``where`` to the directory ``path`` as float32 (NULL -> NaN), one fragment at a time (the
    next ``READ_AHEAD`` read in threads meanwhile).

    Raises:
        ValidationError: bad arguments, a non-numeric column, a target that is not a directory.
        UnknownColumnError: a column the snapshot lacks.
        AlreadyExistsError: ``path`` exists and ``overwrite`` is False.
    """
    table = reader.snapshot.table.name
    names = _check_columns(reader, features, label, table)
    target = _check_target(path, overwrite, table)
    plan = reader.plan(names, where, None)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir(parents=False)
    try:
        schema = _write(reader, plan.fragments, plan.where_columns, tmp, features, label, where)
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MmapExport(target, schema)


def _write(
    reader: FragmentReader,
    fragments: list[Any],
    where_cols: list[str],
    tmp: Path,
    features: list[str],
    label: str | None,
    where: pc.Expression | None,
) -> dict[str, Any]:
    """Stream the fragments into ``tmp``; returns the schema document (also written there)."""
    names = list(dict.fromkeys([*features, *([label] if label else [])]))
    moments = _Moments(len(features))
    rows = 0
    with open(tmp / FEATURES_FILE, "wb") as fx, open(tmp / LABELS_FILE, "wb") as fy:
        for part in _read_ahead(reader, fragments, names, where, where_cols):
            if part.num_rows == 0:
                continue
            block = np.empty((part.num_rows, len(features)), np.float32)
            for j, name in enumerate(features):
                block[:, j] = _float32(part.column(name))
            moments.add(block)
            block.tofile(fx)
            if label is not None:
                _float32(part.column(label)).tofile(fy)
            rows += part.num_rows
        fx.flush()
        os.fsync(fx.fileno())
        fy.flush()
        os.fsync(fy.fileno())
    if label is None:
        (tmp / LABELS_FILE).unlink()
    snap = reader.snapshot
    doc = {
        "format": FORMAT,
        "table": snap.table.name,
        "table_id": snap.table.table_id,
        "branch": snap.branch,
        "version": snap.version,
        "where": None if where is None else str(where),
        "rows": rows,
        "dtype": "float32",
        "byteorder": "little",
        "features": {"file": FEATURES_FILE, "columns": features, "shape": [rows, len(features)]},
        "label": None if label is None else {"file": LABELS_FILE, "column": label, "shape": [rows]},
        "normalization": moments.summary(features, rows),
    }
    with open(tmp / SCHEMA_FILE, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, allow_nan=False)
        f.write("\n")
    return doc


READ_AHEAD = 2  # fragments read in threads while the previous one is converted and written


def _read_ahead(
    reader: FragmentReader,
    fragments: list[Any],
    names: list[str],
    where: pc.Expression | None,
    where_cols: list[str],
) -> Iterator[pa.Table]:
    """The fragments' live rows, in order, with up to ``READ_AHEAD`` fragments read in threads
    ahead of the one handed out (at most ``READ_AHEAD + 1`` fragments in memory)."""
    if len(fragments) < 2:
        yield from (reader.read_fragment(f, names, where, where_cols) for f in fragments)
        return
    todo = iter(fragments)
    pending: deque[Future[pa.Table]] = deque()
    with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="omnitable-export") as pool:
        try:
            for frag in todo:
                pending.append(pool.submit(reader.read_fragment, frag, names, where, where_cols))
                if len(pending) == READ_AHEAD:
                    break
            while pending:
                part = pending.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(reader.read_fragment, nxt, names, where, where_cols))
                yield part
        finally:
            for f in pending:
                f.cancel()


def _float32(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric column as float32 with NULLs as NaN."""
    cast = pc.cast(column, pa.float32(), safe=False)
    return np.asarray(cast.to_numpy(zero_copy_only=False), dtype=np.float32)


def _check_columns(
    reader: FragmentReader, features: object, label: object, table: str
) -> list[str]:
    what = f"export table '{table}' to mmap"
    if isinstance(features, str) or not isinstance(features, (list, tuple)) or not features:
        raise ValidationError(
            f"Cannot {what}: features must be a non-empty list of column names, got {features!r}"
        )
    if not all(isinstance(c, str) for c in features) or len(set(features)) != len(features):
        raise ValidationError(f"Cannot {what}: features {features!r} must be distinct names")
    if label is not None and not isinstance(label, str):
        raise ValidationError(f"Cannot {what}: label must be a column name or None")
    names = list(dict.fromkeys([*features, *([label] if label else [])]))
    snap = reader.snapshot
    schema = snap.arrow_schema()
    for name in names:
        if not snap.has_column(name):
            raise UnknownColumnError(
                f"Cannot {what}: no column '{name}'; columns are: " + ", ".join(snap.column_names())
            )
        arrow = schema.field(name).type
        if not (
            pa.types.is_integer(arrow) or pa.types.is_floating(arrow)
            or pa.types.is_boolean(arrow) or pa.types.is_decimal(arrow)
        ):  # fmt: skip
            raise ValidationError(
                f"Cannot {what}: column '{name}' is {arrow}, not numeric; mmap exports hold "
                "float32 only (export numeric columns, or derive a numeric feature first)"
            )
    return names


def _check_target(path: object, overwrite: bool, table: str) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValidationError(
            f"Cannot export table '{table}' to mmap: path must be a local directory path, "
            f"got {path!r}"
        )
    target = Path(path).expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise ValidationError(
            f"Cannot export table '{table}' to mmap: {target} exists and is not a directory"
        )
    if target.exists() and not overwrite:
        raise AlreadyExistsError(
            f"Cannot export table '{table}' to mmap: {target} already exists; pass "
            "overwrite=True to replace it"
        )
    if not target.parent.is_dir():
        raise ValidationError(
            f"Cannot export table '{table}' to mmap: the parent directory {target.parent} "
            "does not exist"
        )
    return target


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename the finished ``tmp`` to ``target``; an existing target is renamed aside first
    and removed after (a crash between the renames leaves it under ``.<name>.old-*``)."""
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
    os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def read_schema(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``schema.json`` of an mmap export directory.

    Raises:
        ValidationError: not an mmap export (no or a foreign schema.json).
    """
    file = Path(path) / SCHEMA_FILE
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError(
            f"Cannot open mmap export {path}: no readable {SCHEMA_FILE} ({exc}); write one "
            "with Table.export_mmap"
        ) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValidationError(f"Cannot open mmap export {path}: {file} is not an {FORMAT} file")
    return doc
