"""The three-way diff of a merge (docs/branches.md, "Merging"): what the source branch changed
since the merge base, cell by cell, and where the target changed the same thing.

Everything is compared by what it points at, not by catalog ids (a merge adopts rows as copies
with new ids): a fragment by its path, a cell ``(fragment, column)`` by the path of the file
providing it, a deletion vector by its bits, a batch by the paths of its fragments, a column by
its id (ids are unique per table across branches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omnitable.catalog.records import ColumnRecord, FileRecord, FragmentRecord
from omnitable.catalog.snapshot import Snapshot


@dataclass(frozen=True)
class Conflict:
    """One thing both branches changed differently. ``kind``: ``cell`` (a column of a fragment
    provided by different files), ``rows`` (rows deleted on one side and changed on the other),
    ``batch`` (a batch replaced or changed on both sides, or changed on one and replaced on the
    other), ``column`` (renamed, retired or restored differently, or added under one name),
    ``feature`` (a feature's current version changed differently) or ``key`` (a keyed table's
    key inserted on both). ``where``: the fragment path, batch name or
    column name; ``column``: the column of a cell or rows; ``source`` / ``target``: what each
    side has (a file path, ``deleted``, a name ...)."""

    kind: str
    where: str
    column: str | None
    source: str
    target: str
    column_id: int | None = None
    rows: tuple[int, ...] = ()  # ``rows``: the offsets in the fragment


@dataclass
class View:
    """One snapshot indexed for the diff: fragments by path, cells, vectors, batches."""

    snap: Snapshot
    frags: dict[str, FragmentRecord] = field(default_factory=dict)
    batches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    columns: dict[int, ColumnRecord] = field(default_factory=dict)  # retired ones too
    features: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> current row

    @classmethod
    def of(
        cls, snap: Snapshot, columns: list[ColumnRecord], features: list[dict[str, Any]]
    ) -> View:
        view = cls(snap, columns={c.column_id: c for c in columns})
        view.features = {r["name"]: r for r in features}  # oldest first: the last one wins
        paths: dict[str, list[str]] = {}
        for frag in snap.fragments:  # in the table's row order: seq order within a batch
            view.frags[frag.path] = frag
            paths.setdefault(frag.batch_name, []).append(frag.path)
        view.batches = {b.name: tuple(paths.get(b.name, ())) for b in snap.batches}
        return view

    def cells(self, path: str) -> dict[int, FileRecord]:
        """Column id -> the file providing it in the fragment at ``path`` (newest wins)."""
        out: dict[int, FileRecord] = {}
        for f in self.snap.files_by_fragment.get(self.frags[path].fragment_id, ()):
            for cid in f.columns:
                best = out.get(cid)
                if best is None or f.added_version > best.added_version:
                    out[cid] = f
        return out

    def file_paths(self, path: str) -> frozenset[str]:
        return frozenset(
            f.path for f in self.snap.files_by_fragment.get(self.frags[path].fragment_id, ())
        )

    def mask(self, path: str) -> np.ndarray:
        """The fragment's deleted rows (all False when it has no vector)."""
        frag = self.frags[path]
        dv = self.snap.deletion(frag.fragment_id)
        return np.zeros(frag.row_count, dtype=bool) if dv is None else dv.mask()

    def vector(self, path: str) -> str | None:
        dv = self.snap.deletion(self.frags[path].fragment_id)
        return None if dv is None else dv.vector


@dataclass
class FragmentMerge:
    """What the merge does to one fragment the three sides share: the source files whose
    columns it adopts (file -> column ids), and the fragment's new deleted rows (None: keep)."""

    path: str
    adopt: dict[str, tuple[FileRecord, list[int]]] = field(default_factory=dict)
    mask: np.ndarray | None = None


@dataclass
class Diff:
    """The merge's decisions before conflicts are resolved."""

    fragments: list[FragmentMerge] = field(default_factory=list)
    copy_batches: list[str] = field(default_factory=list)  # from the source, whole
    remove_batches: list[str] = field(default_factory=list)  # on the target
    features: list[dict[str, Any]] = field(default_factory=list)  # source rows to register
    new_columns: list[int] = field(default_factory=list)  # source column ids to add
    changed_columns: list[int] = field(default_factory=list)  # source column ids to apply
    conflicts: list[Conflict] = field(default_factory=list)
    # rows deleted on one side whose cells the other side changed: (path, side that deleted,
    # column id, offsets); checked against the values before they are conflicts
    row_checks: list[tuple[str, str, int, np.ndarray]] = field(default_factory=list)
    # keyed tables: source fragment path -> offsets of the live rows of a copied batch whose
    # keys the target inserted too (``key`` conflicts; "ours" copies the batch without them)
    key_drops: dict[str, np.ndarray] = field(default_factory=dict)

    def changes(self) -> int:
        return (len(self.fragments) + len(self.copy_batches) + len(self.remove_batches)
                + len(self.new_columns) + len(self.changed_columns)
                + len(self.features))  # fmt: skip


def diff(base: View, source: View, target: View) -> Diff:
    """The three-way diff of ``source`` into ``target`` against ``base``."""
    out = Diff()
    _diff_features(base, source, target, out)
    _diff_columns(base, source, target, out)
    changed_batches = _diff_batches(base, source, target, out)
    for path in source.frags.keys() & base.frags.keys():
        if source.frags[path].batch_name in changed_batches:
            continue  # the batch goes whole (or conflicts whole)
        if path not in target.frags:
            if _fragment_changed(base, source, path):
                name = base.frags[path].batch_name
                out.conflicts.append(Conflict("batch", name, None, "changed", "replaced"))
            continue
        merged = _diff_fragment(base, source, target, path, out)
        if merged is not None:
            out.fragments.append(merged)
    return out


def _fragment_changed(a: View, b: View, path: str) -> bool:
    return a.file_paths(path) != b.file_paths(path) or a.vector(path) != b.vector(path)


def _diff_features(base: View, source: View, target: View, out: Diff) -> None:
    """A feature whose current version the source changed (registered, or made an older one
    current) and the target did not is registered on the target with the source's row."""
    for name, row in sorted(source.features.items()):
        was, now = _version(base.features.get(name)), _version(target.features.get(name))
        if row["version"] == was or row["version"] == now:
            continue
        if now != was:
            out.conflicts.append(Conflict("feature", name, None, row["version"], str(now)))
        else:
            out.features.append(row)


def _version(row: dict[str, Any] | None) -> str | None:
    return None if row is None else str(row["version"])


def _diff_columns(base: View, source: View, target: View, out: Diff) -> None:
    taken = {c.name: cid for cid, c in target.columns.items()}
    for cid, col in sorted(source.columns.items()):
        b, t = base.columns.get(cid), target.columns.get(cid)
        meta = (col.name, col.state)
        if b is not None and (b.name, b.state) == meta:
            continue
        if b is None:
            if t is None and col.name in taken:
                out.conflicts.append(Conflict("column", col.name, col.name, "added", "exists", cid))
            elif t is None:
                out.new_columns.append(cid)
            continue
        if t is None or (t.name, t.state) == (b.name, b.state):
            if t is not None:
                out.changed_columns.append(cid)
        elif (t.name, t.state) != meta:
            out.conflicts.append(
                Conflict(
                    "column",
                    b.name,
                    b.name,
                    f"{col.name} ({col.state})",
                    f"{t.name} ({t.state})",
                    cid,
                )
            )


def _diff_batches(base: View, source: View, target: View, out: Diff) -> set[str]:
    """Batches whose fragment lists the source changed; returns their names."""
    changed = set()
    for name in sorted(source.batches.keys() | base.batches.keys()):
        s, b, t = source.batches.get(name), base.batches.get(name), target.batches.get(name)
        if s == b:
            continue
        changed.add(name)
        if t == b and b is not None and any(_fragment_changed(base, target, p) for p in b):
            out.conflicts.append(Conflict("batch", name, None, _batch_state(s), "changed"))
        elif t in (b, s):
            if t == s:
                continue
            if s is None:
                out.remove_batches.append(name)
            else:
                out.copy_batches.append(name)
        else:
            out.conflicts.append(Conflict("batch", name, None, _batch_state(s), _batch_state(t)))
    return changed


def _batch_state(paths: tuple[str, ...] | None) -> str:
    return "absent" if paths is None else f"{len(paths)} fragment(s)"


def _diff_fragment(
    base: View, source: View, target: View, path: str, out: Diff
) -> FragmentMerge | None:
    if not _fragment_changed(base, source, path):
        return None
    merged = FragmentMerge(path)
    cb, cs, ct = base.cells(path), source.cells(path), target.cells(path)
    target_changed = [cid for cid in ct if _file_path(ct.get(cid)) != _file_path(cb.get(cid))]
    source_changed = []
    for cid in cb.keys() - cs.keys():  # a rollback or revert on the source took the cell away
        name = source.columns[cid].name if cid in source.columns else str(cid)
        out.conflicts.append(
            Conflict("cell", path, name, "none", str(_file_path(ct.get(cid))), cid)
        )
    for cid, f in cs.items():
        was, now = _file_path(cb.get(cid)), _file_path(ct.get(cid))
        if f.path == was or f.path == now:
            continue
        source_changed.append(cid)
        if now != was:
            name = target.columns[cid].name if cid in target.columns else str(cid)
            out.conflicts.append(Conflict("cell", path, name, f.path, str(now), cid))
            continue
        merged.adopt.setdefault(f.path, (f, []))[1].append(cid)
    _diff_deletes(base, source, target, path, merged, (source_changed, target_changed), out)
    return merged if merged.adopt or merged.mask is not None else None


def _diff_deletes(
    base: View,
    source: View,
    target: View,
    path: str,
    merged: FragmentMerge,
    changed: tuple[list[int], list[int]],
    out: Diff,
) -> None:
    """Bits the source changed win (both sides changing a bit change it the same way); rows one
    side deleted (and the other did not) where the other changed a cell are checked by value
    later."""
    vb = base.vector(path)
    if source.vector(path) == vb and target.vector(path) == vb:
        return  # no side deleted anything new here
    mb, ms, mt = base.mask(path), source.mask(path), target.mask(path)
    flipped = ms ^ mb
    if flipped.any():
        result = (mt & ~flipped) | (ms & flipped)
        if not np.array_equal(result, mt):
            merged.mask = result
    for side, deleted, cells in (  # (a row both sides deleted is gone either way)
        ("source", ms & ~mb & ~mt, changed[1]),
        ("target", mt & ~mb & ~ms, changed[0]),
    ):
        rows = np.flatnonzero(deleted)
        if len(rows):
            out.row_checks.extend((path, side, cid, rows) for cid in cells)


def _file_path(f: FileRecord | None) -> str | None:
    return None if f is None else f.path
