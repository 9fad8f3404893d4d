"""Batches of one pinned snapshot for training loops, sharded across ranks and workers
(docs/training.md, "Loader" and "Resume"). No torch, no JVM, no Spark: the Python zip reader.

The snapshot is resolved once, when the :class:`BatchLoader` is made, so every epoch and every
rank reads the same rows. Its live fragments are cut into *units* (a fragment, or a row range of
at most ``unit_rows`` rows of a large one). An epoch's work is a pure function of the snapshot,
the seed and the epoch:

* the unit order (fragment order, or a permutation of the units when shuffling);
* each unit's row order (its live rows — not deleted, passing ``where`` — in offset order, or a
  permutation of them);
* shard ``s`` of ``n`` (``n = world_size * num_workers``, ``s = rank * num_workers + worker``)
  takes every ``n``-th unit of the remaining ones; it opens ``buffer_units`` of them at a time
  and, when shuffling, interleaves their rows in a seeded random order (the shuffle buffer).

A unit is always consumed as a prefix of its own row order, so progress is a count per unit
(:class:`Progress`): the rows of a unit already handed out. Resuming — on any world size — takes
the remaining units (with their offsets) and shards them again: no row is read twice or skipped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.exceptions import ValidationError
from omnitable.format.fs import Location
from omnitable.format.reader import FragmentReader

DEFAULT_BATCH_SIZE = 1024
DEFAULT_UNIT_ROWS = 65_536
DEFAULT_BUFFER_UNITS = 4
STATE_FORMAT = 1
_INTERLEAVE = 1 << 30  # a stream id for the shuffle buffer's seed (apart from unit indexes)


class SnapshotSource(Protocol):
    """What the loader needs of a table (``omnitable.Table`` is one)."""

    @property
    def location(self) -> Location: ...

    def snapshot(
        self,
        *,
        version: int | None = ...,
        branch: str | None = ...,
        tag: str | None = ...,
        with_files: bool = ...,
        scope: SnapshotScope = ...,
    ) -> Snapshot: ...


@dataclass(frozen=True)
class Unit:
    """A unit of work: rows ``[start, stop)`` of one fragment (``index``: its place in the
    snapshot's unit list, fragment order)."""

    index: int
    fragment: FragmentRecord
    start: int
    stop: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.fragment.row_count


@dataclass(frozen=True)
class Batch:
    """Rows one shard hands out, and that shard's progress once they are consumed: ``taken``
    maps a unit to the rows of its order consumed so far, ``done`` lists the units finished.
    ``data`` is None for the shard's closing marker (progress only, no rows)."""

    data: pa.RecordBatch | None
    shard: int
    taken: dict[int, int]
    done: tuple[int, ...]


@dataclass
class Progress:
    """Rows consumed in one epoch: finished units and counts of partly consumed ones. States
    of different ranks merge (:meth:`merge`); :meth:`remaining` is what is left, in epoch order."""

    epoch: int
    done: set[int] = field(default_factory=set)
    taken: dict[int, int] = field(default_factory=dict)

    def record(self, batch: Batch) -> None:
        self.taken.update(batch.taken)
        for unit in batch.done:
            self.done.add(unit)
            self.taken.pop(unit, None)

    def merge(self, other: Progress) -> None:
        if other.epoch != self.epoch:
            raise ValidationError(
                f"Cannot merge loader states of epochs {self.epoch} and {other.epoch}: every "
                "rank must checkpoint the same epoch"
            )
        self.done |= other.done
        for unit, n in other.taken.items():
            self.taken[unit] = max(n, self.taken.get(unit, 0))
        for unit in self.done:
            self.taken.pop(unit, None)


class BatchLoader:
    """Batches of ``columns`` of a pinned snapshot (see the module docstring).

    Args:
        table: an ``omnitable.Table`` (or anything with ``location`` and ``snapshot()``).
        columns: columns to return, in that order (default: all, system columns first).
        version, tag, branch: the snapshot (at most one of version and tag; default: the head
            of the table's branch when the loader is made).
        where: a pyarrow compute expression, as ``Table.read`` accepts.
        batch_size: rows per batch (the last batch of a shard may be smaller).
        shuffle, seed: shuffle units and rows, deterministically from ``(seed, epoch)``.
        drop_last: drop each shard's last batch when it is smaller than ``batch_size``.
        unit_rows: fragments with more rows are read as row ranges of at most this many rows
            (and at most a quarter of the fragment).
        buffer_units: units a shard interleaves at a time when shuffling.

    Raises:
        UnknownColumnError, NotFoundError (version, tag, branch), ValidationError.
    """

    def __init__(
        self,
        table: SnapshotSource,
        columns: list[str] | None = None,
        *,
        version: int | None = None,
        tag: str | None = None,
        branch: str | None = None,
        where: pc.Expression | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        unit_rows: int = DEFAULT_UNIT_ROWS,
        buffer_units: int = DEFAULT_BUFFER_UNITS,
    ) -> None:
        for name, value in (("batch_size", batch_size), ("unit_rows", unit_rows),
                            ("buffer_units", buffer_units)):  # fmt: skip
            _check_int(name, value, 1)
        _check_int("seed", seed, 0)
        if version is not None and tag is not None:
            raise ValidationError("Cannot load a table: give a version or a tag, not both")
        scope = SnapshotScope.of(None, columns, where)
        snap = table.snapshot(version=version, tag=tag, branch=branch, scope=scope)
        self.reader = FragmentReader(table.location, snap)
        plan = self.reader.plan(columns, where)  # checks the columns and the filter
        self.columns, self.where, self._where_cols = plan.columns, where, plan.where_columns
        self.batch_size, self.shuffle, self.seed = batch_size, bool(shuffle), seed
        self.drop_last, self.unit_rows, self.buffer_units = bool(drop_last), unit_rows, buffer_units
        self.units = _cut(plan.fragments, unit_rows)
        self.schema = pa.schema([snap.arrow_schema().field(c) for c in self.columns])

    @property
    def snapshot(self) -> Snapshot:
        return self.reader.snapshot

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for spawned DataLoader workers: the reader (it holds a lock) is remade."""
        state = dict(self.__dict__)
        reader = state.pop("reader")
        state["_snapshot"] = (reader.location, reader.snapshot, reader.max_selectivity)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        location, snap, selectivity = state.pop("_snapshot")
        self.__dict__.update(state)
        self.reader = FragmentReader(location, snap, selectivity)

    # -- epoch plan -----------------------------------------------------------------------

    def unit_order(self, epoch: int) -> list[int]:
        """The epoch's unit order (unit indexes)."""
        if not self.shuffle:
            return list(range(len(self.units)))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.units)).tolist()

    def shard_work(
        self, epoch: int, shard: int, shards: int, progress: Progress | None = None
    ) -> list[tuple[int, int]]:
        """``(unit, rows already consumed)`` for shard ``shard`` of ``shards``: every
        ``shards``-th unit of those ``progress`` (default: nothing) has not finished."""
        done = progress.done if progress is not None else set()
        taken = progress.taken if progress is not None else {}
        remaining = [u for u in self.unit_order(epoch) if u not in done]
        return [(u, taken.get(u, 0)) for u in remaining[shard::shards]]

    def batches(
        self,
        epoch: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        progress: Progress | None = None,
    ) -> Iterator[Batch]:
        """The batches of one shard (``rank * num_workers + worker``) for ``epoch``, resuming
        after ``progress``; ends with a marker batch (``data`` None) closing the shard."""
        _check_int("epoch", epoch, 0)
        _check_int("world_size", world_size, 1)
        _check_int("num_workers", num_workers, 1)
        _check_rank("rank", rank, world_size)
        _check_rank("worker", worker, num_workers)
        if progress is not None and progress.epoch != epoch:
            raise ValidationError(
                f"Cannot resume epoch {epoch} from the progress of epoch {progress.epoch}"
            )
        shard, shards = rank * num_workers + worker, world_size * num_workers
        work = self.shard_work(epoch, shard, shards, progress)
        return self._stream(epoch, shard, work)

    # -- reading --------------------------------------------------------------------------

    def _stream(self, epoch: int, shard: int, work: list[tuple[int, int]]) -> Iterator[Batch]:
        """Batches of ``work`` (units with rows to skip), ``buffer_units`` units open at a time,
        each batch carrying the progress it completes; then the closing marker."""
        pieces: list[tuple[pa.Table, np.ndarray]] = []
        buffered = 0
        counts: dict[int, int] = {}
        left: dict[int, int] = {}  # unit -> rows not yet handed out
        groups = [work[g : g + self.buffer_units] for g in range(0, len(work), self.buffer_units)]
        for group, (ordered, labels) in zip(groups, self._read_ahead(epoch, groups), strict=True):
            for unit, skip in group:
                counts[unit] = skip
            units = np.array([u for u, _ in group], dtype=np.int64)
            for unit, n in zip(
                units.tolist(), np.bincount(labels, minlength=len(group)).tolist(), strict=True
            ):
                left[unit] = n
            pieces.append((ordered, units[labels]))
            buffered += ordered.num_rows
            while buffered >= self.batch_size:
                yield self._emit(shard, pieces, self.batch_size, counts, left)
                buffered -= self.batch_size
        if buffered and not self.drop_last:
            yield self._emit(shard, pieces, buffered, counts, left)
        yield Batch(None, shard, {}, tuple(u for u, _ in work))

    def _read_ahead(
        self, epoch: int, groups: list[list[tuple[int, int]]]
    ) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """The groups opened in order, the next one read in a thread meanwhile (reading
        releases the GIL: I/O and decoding overlap the consumer)."""
        if not groups:
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="omnitable-loader") as pool:
            ahead = pool.submit(self._open_group, epoch, groups[0])
            for nxt in [*groups[1:], None]:
                current = ahead.result()
                if nxt is not None:
                    ahead = pool.submit(self._open_group, epoch, nxt)
                yield current

    def _emit(
        self,
        shard: int,
        pieces: list[tuple[pa.Table, np.ndarray]],
        n: int,
        counts: dict[int, int],
        left: dict[int, int],
    ) -> Batch:
        """The next ``n`` buffered rows as a batch (``pieces`` loses them)."""
        tables, labels, need = [], [], n
        while need:
            table, units = pieces[0]
            k = min(need, table.num_rows)
            tables.append(table.slice(0, k))
            labels.append(units[:k])
            if k == table.num_rows:
                pieces.pop(0)
            else:
                pieces[0] = (table.slice(k), units[k:])
            need -= k
        lab = labels[0] if len(labels) == 1 else np.concatenate(labels)
        low = int(lab.min())
        per = np.bincount(lab - low)
        used = [low + i for i in np.flatnonzero(per).tolist()]
        for unit in used:
            k = int(per[unit - low])
            counts[unit] += k
            left[unit] -= k
        finished = tuple(u for u, r in left.items() if r == 0)
        for unit in finished:
            del left[unit]
        taken = {u: counts[u] for u in used if u not in finished}
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        data = table.combine_chunks().to_batches()[0]
        return Batch(data, shard, taken, finished)

    def _open_group(self, epoch: int, group: list[tuple[int, int]]) -> tuple[pa.Table, np.ndarray]:
        """The remaining rows of a group of units in the order they are handed out, and the
        position in ``group`` of each row's unit."""
        tables = [self.unit_rows_of(epoch, u, skip) for u, skip in group]
        sizes = np.array([t.num_rows for t in tables], dtype=np.int64)
        labels = np.repeat(np.arange(len(group)), sizes)
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        if not self.shuffle or len(group) == 1:
            return table, labels
        rng = np.random.default_rng([self.seed, epoch, _INTERLEAVE, group[0][0]])
        rng.shuffle(labels)
        # the q-th row handed out is row (offset of its unit + its rank among that unit's rows)
        order = np.empty(len(labels), dtype=np.int64)
        order[np.argsort(labels, kind="stable")] = np.arange(len(labels))
        return table.take(pa.array(order)), labels

    def unit_rows_of(self, epoch: int, unit: int, skip: int = 0) -> pa.Table:
        """Unit ``unit``'s live rows in its epoch order, without the first ``skip``."""
        u = self.units[unit]
        if u.whole:
            table = self.reader.read_fragment(
                u.fragment, self.columns, self.where, self._where_cols
            )
        else:
            table = self._read_range(u)
        if self.shuffle and table.num_rows > 1:
            perm = np.random.default_rng([self.seed, epoch, unit]).permutation(table.num_rows)
            table = table.take(pa.array(perm))
        return table.slice(skip) if skip else table

    def _read_range(self, u: Unit) -> pa.Table:
        """Live rows of a row range of a fragment (deletes and ``where`` applied)."""
        names = self.columns + [c for c in self._where_cols if c not in self.columns]
        table = self.reader.read_rows(u.fragment, names, np.arange(u.start, u.stop))
        dv = self.snapshot.deletion(u.fragment.fragment_id)
        if dv is not None:
            table = table.filter(pa.array(~dv.mask()[u.start : u.stop]))
        if self.where is not None:
            table = table.filter(self.where)
        return table.select(self.columns).cast(self.schema)

    # -- state ----------------------------------------------------------------------------

    def state(self, progress: Progress) -> dict[str, Any]:
        """A checkpoint of ``progress`` (plain data: JSON- and ``torch.save``-able)."""
        return {
            **self._identity(),
            "epoch": progress.epoch,
            "done": sorted(progress.done),
            "taken": sorted([u, n] for u, n in progress.taken.items()),
        }

    def progress_of(self, state: Mapping[str, Any]) -> Progress:
        """The progress a checkpoint of this loader records.

        Raises:
            ValidationError: the state is not a loader state, or is of another table, snapshot,
                column list, filter, seed or unit size.
        """
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValidationError(
                "Cannot load the loader state: not a state_dict() of an OmniTable loader"
            )
        mine = self._identity()
        wrong = [k for k in mine if state.get(k) != mine[k]]
        if wrong:
            diffs = ", ".join(f"{k}={state.get(k)!r} (this loader: {mine[k]!r})" for k in wrong)
            raise ValidationError(
                f"Cannot resume from this loader state: it is of another loader ({diffs}); "
                "make the loader with the same table, snapshot, columns, where, shuffle, seed "
                "and unit_rows"
            )
        try:
            done = {int(u) for u in state["done"]}
            taken = {int(u): int(n) for u, n in state["taken"]}
            epoch = int(state["epoch"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"Cannot load the loader state: malformed ({exc})") from exc
        return Progress(epoch, done, taken)

    def _identity(self) -> dict[str, Any]:
        snap = self.snapshot
        return {
            "format": STATE_FORMAT,
            "table_id": snap.table.table_id,
            "branch": snap.branch,
            "version": snap.version,
            "columns": list(self.columns),
            "where": None if self.where is None else str(self.where),
            "shuffle": self.shuffle,
            "seed": self.seed,
            "unit_rows": self.unit_rows,
            "units": len(self.units),
        }


def merge_states(loader: BatchLoader, states: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One state from the states of every rank of a world (each rank records its own shards)."""
    merged: Progress | None = None
    for state in states:
        progress = loader.progress_of(state)
        if merged is None:
            merged = progress
        else:
            merged.merge(progress)
    if merged is None:
        raise ValidationError("Cannot merge loader states: no state given")
    return loader.state(merged)


def to_numpy(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    """A batch as numpy arrays, without copying where Arrow allows: numeric columns without
    nulls, and lists of numbers of one length (embeddings) as 2-D ``(rows, length)`` views.
    Other columns are converted (strings and ragged lists to object arrays; numbers with nulls
    to float with NaN)."""
    return {
        name: column_numpy(col) for name, col in zip(batch.schema.names, batch.columns, strict=True)
    }


def column_numpy(col: pa.Array) -> np.ndarray:
    """One column as :func:`to_numpy` converts it."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return col.to_numpy(zero_copy_only=not col.null_count)
    width = uniform_list_width(col)
    if width is not None:
        return col.flatten().to_numpy(zero_copy_only=True).reshape(len(col), width)
    return col.to_numpy(zero_copy_only=False)


def uniform_list_width(col: pa.Array) -> int | None:
    """The common length of a list column's values when it is a dense matrix of numbers (no
    null list, no null number, every list as long), else None."""
    t = col.type
    fixed = pa.types.is_fixed_size_list(t)
    if not (fixed or pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    if not (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)):
        return None
    if col.null_count or col.flatten().null_count:
        return None
    if fixed:
        return int(t.list_size)
    offsets = col.offsets.to_numpy()
    if len(offsets) < 2:
        return None
    width = int(offsets[1] - offsets[0])
    if width * (len(offsets) - 1) != offsets[-1] - offsets[0]:
        return None  # cheap test first; then the exact one
    return width if (np.diff(offsets) == width).all() else None


def _cut(fragments: list[FragmentRecord], unit_rows: int) -> list[Unit]:
    """Whole fragments, and row ranges of those over ``unit_rows`` rows: at least 4 ranges, so
    that each is a quarter of its fragment at most (the reader then decodes only the row groups
    or pages holding it, ``read.late_materialization_max_selectivity``)."""
    units: list[Unit] = []
    for frag in fragments:
        n = frag.row_count
        pieces = 1 if n <= unit_rows else max(4, -(-n // unit_rows))
        bounds = [n * i // pieces for i in range(pieces + 1)]
        for start, stop in itertools.pairwise(bounds):
            units.append(Unit(len(units), frag, start, stop))
    return units


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValidationError(
            f"Cannot load a table: {name} must be an integer >= {low}, got {value!r}"
        )


def _check_rank(name: str, value: object, size: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value < size:
        size_name = "world_size" if name == "rank" else "num_workers"
        raise ValidationError(
            f"Cannot load a table: {name} must be in [0, {size_name}={size}), got {value!r}"
        )
