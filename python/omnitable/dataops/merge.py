"""``Table.merge``: bring a branch's changes into another branch at column grain
(docs/branches.md, "Merging").

A fast-forward when the target has not moved since the source forked from it (the source's
rows become the target's; nothing is copied). Otherwise a three-way merge against the merge
base (:mod:`omnitable.dataops.merge_plan`): every (fragment, column) cell, deletion vector,
batch and column the source changed and the target did not is adopted by one ``merge`` commit
on the target, which points at the source's data files (no data file is written); cells both
changed differently are conflicts, which ``strategy`` fails on (``fail``) or resolves
(``ours``: the target's, ``theirs``: the source's). The commit needs the target's head and the
source's head to be the ones planned on; when either moved, the merge plans again.
"""

from __future__ import annotations

import getpass
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import (
    ColumnChange,
    CommitRequest,
    FeatureRow,
    LineageEntry,
    NewColumn,
    NewDeletion,
)
from omnitable.catalog.records import FileRecord, FragmentRecord
from omnitable.catalog.refs import check_ref_name
from omnitable.context import TableContext
from omnitable.dataops.merge_plan import Conflict, Diff, FragmentMerge, View, diff
from omnitable.dataops.merge_rows import check_keys, check_rows
from omnitable.exceptions import CommitConflict, MergeConflict, ValidationError
from omnitable.vocabulary.deletions import encode_vector
from omnitable.vocabulary.descriptors import FileDescriptor, FragmentDescriptor

STRATEGIES = ("fail", "ours", "theirs")
_ROUNDS = 5  # plans tried when the target or source moves in between


@dataclass(frozen=True)
class MergeResult:
    """What a merge did. ``version``: the target's new head (None: nothing to merge);
    ``fast_forward``: the target took the source's rows as they were; ``base_version``: the
    merge base; ``cells``: (fragment, column) cells adopted; ``batches``: batches copied or
    removed; ``deletes``: fragments whose deleted rows changed; ``columns``: columns added or
    renamed, retired, restored; ``features``: feature versions registered; ``resolved``:
    conflicts the strategy resolved."""

    version: int | None
    fast_forward: bool
    base_version: int
    source_version: int
    cells: int = 0
    batches: int = 0
    deletes: int = 0
    columns: int = 0
    features: int = 0
    resolved: list[Conflict] = field(default_factory=list)


def merge(ctx: TableContext, source: str, into: str, strategy: str) -> MergeResult:
    """Merge branch ``source`` into branch ``into`` (see ``Table.merge``).

    Raises:
        ValidationError: bad names or strategy, a branch merged into itself.
        NotFoundError: an unknown branch.
        MergeConflict: conflicts with ``strategy="fail"`` (listed cell by cell).
        CommitConflict: a branch kept moving while the merge was planned (5 tries).
    """
    check_ref_name(source, "branch")
    check_ref_name(into, "branch")
    if strategy not in STRATEGIES:
        raise ValidationError(
            f"Cannot merge: strategy must be one of {STRATEGIES}, got {strategy!r}"
        )
    if source == into:
        raise ValidationError(f"Cannot merge branch '{source}' into itself")
    last: CommitConflict | None = None
    for _ in range(_ROUNDS):
        try:
            return _merge_once(ctx, source, into, strategy)
        except MergeConflict:
            raise
        except CommitConflict as exc:  # a branch moved: plan again
            last = exc
    assert last is not None
    raise last


def _merge_once(ctx: TableContext, source: str, into: str, strategy: str) -> MergeResult:
    catalog, record = ctx.catalog, ctx.record
    source_head = catalog.head_version(record, source)
    target_head = catalog.head_version(record, into)
    base_branch, base_version = catalog.merge_base(record, source, into)
    if source_head == base_version:  # nothing new on the source since the base
        return MergeResult(None, False, base_version, source_head)
    if catalog.can_fast_forward(record, source, into):
        failpoint("merge.before_commit")
        version = catalog.fast_forward(record, source, into, source_head)
        return MergeResult(version, True, base_version, source_head)
    views = [
        View.of(ctx.snapshot(branch=b, version=v), catalog.columns_at(record, b, v),
                catalog.feature_rows(record, None, b, v))
        for b, v in ((base_branch, base_version), (source, source_head), (into, target_head))
    ]  # fmt: skip
    base, src, dst = views
    plan = diff(base, src, dst)
    plan.conflicts += check_rows(ctx, plan, base, src, dst)
    plan.conflicts += check_keys(ctx, plan, base, src, dst)
    if plan.conflicts and strategy == "fail":
        raise MergeConflict(_conflict_message(source, into, plan.conflicts), plan.conflicts)
    theirs = strategy == "theirs"
    _resolve_rows(plan, dst, theirs)
    # committed even when it changes nothing (the target already had it all, or "ours" kept
    # every conflict): the commit records the source version merged, the next merge's base
    req = _Request(ctx, src, dst).build(plan, theirs)
    req.op, req.base_version, req.exact_base = "merge", target_head, True
    req.source_head = (source, source_head)
    req.summary = {"source": source, "source_version": source_head, "base_version": base_version,
                   "strategy": strategy, "user": getpass.getuser(), **_counts(plan)}  # fmt: skip
    failpoint("merge.before_commit")
    version = ctx.catalog.commit(record, _on(req, into))
    return MergeResult(version, False, base_version, source_head, resolved=plan.conflicts,
                       **_counts(plan))  # fmt: skip


def _on(req: CommitRequest, branch: str) -> CommitRequest:
    req.branch = branch
    return req


def _counts(plan: Diff) -> dict[str, int]:
    return {
        "cells": sum(len(cids) for f in plan.fragments for _, cids in f.adopt.values()),
        "batches": len(plan.copy_batches) + len(plan.remove_batches),
        "deletes": sum(1 for f in plan.fragments if f.mask is not None),
        "columns": len(plan.new_columns) + len(plan.changed_columns),
        "features": len(plan.features),
    }


def _conflict_message(source: str, into: str, conflicts: list[Conflict]) -> str:
    shown = "; ".join(
        f"{c.kind} {c.where}"
        + (f" column {c.column}" if c.column else "")
        + f" (source: {c.source}, target: {c.target})"
        for c in conflicts[:5]
    )
    more = f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
    return (
        f"Cannot merge branch '{source}' into '{into}': {len(conflicts)} conflict(s): {shown}"
        f"{more}; nothing was committed. Merge with strategy='ours' (keep '{into}') or "
        f"'theirs' (take '{source}'), or change one branch and merge again (see "
        "MergeConflict.details)"
    )


def _resolve_rows(plan: Diff, dst: View, theirs: bool) -> None:
    """Rows deleted on one side and updated on the other stay alive (not deleted) on the side
    the strategy keeps: ``ours`` drops the source's deletes of rows the target updated,
    ``theirs`` the target's deletes of rows the source updated."""
    for c in plan.conflicts:
        if c.kind == "key" and theirs:
            raise ValidationError(
                f"Cannot merge batch '{c.where}' with strategy='theirs': both branches inserted "
                "the same keys; delete them on one branch and merge again"
            )
        if c.kind != "rows" or (c.source == "deleted") == theirs:
            continue
        fm = next((f for f in plan.fragments if f.path == c.where), None)
        if fm is None:
            fm = FragmentMerge(c.where)
            plan.fragments.append(fm)
        mask = dst.mask(c.where).copy() if fm.mask is None else fm.mask
        mask[list(c.rows)] = False
        fm.mask = mask


class _Request:
    """Builds the merge commit from the diff: new ids for every copied row, the source's
    files, statistics and lineage."""

    def __init__(self, ctx: TableContext, src: View, dst: View) -> None:
        self.ctx, self.src, self.dst = ctx, src, dst
        self.req = CommitRequest(op="merge", base_version=dst.snap.version)
        self.names = {cid: c.name for cid, c in dst.columns.items()}
        # (fragment path, source file id, column name) -> new file id: a source file adopted
        # twice in a fragment (some columns merged, others taken by "theirs") gets two rows
        self.file_ids: dict[tuple[str, str, str], str] = {}
        # (source file, new file id, column ids, fragment path) of adopted derived columns
        self.lineage_files: list[tuple[FileRecord, str, list[int], str]] = []

    def build(self, plan: Diff, theirs: bool) -> CommitRequest:
        self._features(plan, theirs)
        self._columns(plan, theirs)
        for name in plan.copy_batches + (_conflict_batches(plan) if theirs else []):
            self._remove_batch(name)
            if name in self.src.batches:
                self._copy_batch(name, plan.key_drops)
        for name in plan.remove_batches:
            self._remove_batch(name)
        for fm in plan.fragments:
            frag = self.dst.frags[fm.path]
            for f, cids in fm.adopt.values():
                self._adopt(frag, f, cids)
            if fm.mask is not None:
                self._deletion(frag, fm.mask)
        if theirs:
            self._theirs_cells(plan)
        self._lineage()
        return self.req

    def _features(self, plan: Diff, theirs: bool) -> None:
        rows = list(plan.features)
        if theirs:
            rows += [self.src.features[c.where] for c in plan.conflicts if c.kind == "feature"]
        for r in rows:
            self.req.features.append(
                FeatureRow(r["name"], r["version"], r["kind"], r["definition"],
                           r["fingerprint"])
            )  # fmt: skip

    def _columns(self, plan: Diff, theirs: bool) -> None:
        changed = list(plan.changed_columns)
        for c in plan.conflicts if theirs else ():
            if c.kind == "column" and c.source == "added":
                raise ValidationError(
                    f"Cannot merge with strategy='theirs': both branches added a column "
                    f"'{c.where}'; rename one and merge again"
                )
            if c.kind == "column" and c.column_id is not None:
                changed.append(c.column_id)
        for cid in plan.new_columns:
            col = self.src.columns[cid]
            self.req.new_columns.append(
                NewColumn(col.name, col.data_type, col.nullable, col.group_name, col.feature, cid,
                          col.physical_name)
            )  # fmt: skip
            self.names[cid] = col.name
        for cid in changed:
            now, was = self.src.columns[cid], self.dst.columns[cid]
            self.req.column_changes.append(
                ColumnChange(cid, was.added_version, now.name, now.state)
            )

    def _remove_batch(self, name: str) -> None:
        batch = next((b for b in self.dst.snap.batches if b.name == name), None)
        if batch is None:
            return
        self.req.removed_batches.append(batch.batch_id)
        paths = self.dst.batches.get(name, ())
        self.req.removed_fragments += [self.dst.frags[p].fragment_id for p in paths]

    def _copy_batch(self, name: str, key_drops: dict[str, np.ndarray]) -> None:
        """Copy batch ``name`` from the source: new catalog rows, the same fragment directories
        and deleted rows, plus the rows whose keys the target inserted too (``ours``)."""
        batch_id = uuid.uuid4().hex
        self.req.new_batches.append((batch_id, name))
        source = next(b for b in self.src.snap.batches if b.name == name)
        self.req.batch_positions[batch_id] = source.position  # the batch keeps its place
        for seq, path in enumerate(self.src.batches[name]):
            frag = self.src.frags[path]
            new = FragmentDescriptor(uuid.uuid4().hex, batch_id, frag.row_count, path, seq=seq)
            for f in self.src.snap.files_by_fragment.get(frag.fragment_id, ()):
                file = self._file(new.fragment_id, path, f, list(f.columns))
                if file.columns:
                    new.files.append(file)
            self.req.new_fragments.append(new)
            dv = self.src.snap.deletion(frag.fragment_id)
            if path in key_drops:
                mask = self.src.mask(path).copy()
                mask[key_drops[path]] = True
                self.req.deletions.append(
                    NewDeletion(new.fragment_id, batch_id, int(mask.sum()), encode_vector(mask))
                )
            elif dv is not None:
                self.req.deletions.append(
                    NewDeletion(new.fragment_id, batch_id, dv.deleted_count, dv.vector)
                )

    def _adopt(self, frag: FragmentRecord, f: FileRecord, cids: list[int]) -> None:
        file = self._file(frag.fragment_id, frag.path, f, cids)
        if file.columns:
            self.req.new_files.append(file)

    def _file(
        self, fragment_id: str, frag_path: str, f: FileRecord, cids: list[int]
    ) -> FileDescriptor:
        new_id = uuid.uuid4().hex
        names = {cid: self.names[cid] for cid in cids if cid in self.names}
        cids = list(names)  # a column the merge does not bring (a conflict left out)
        for cid in cids:
            self.file_ids[(frag_path, f.file_id, names[cid])] = new_id
        desc = FileDescriptor(
            new_id, fragment_id, f.group_name, f.path, f.row_count, f.size_bytes,
            columns={names[cid]: f.stats(cid) for cid in cids},
            feature_versions={names[cid]: v for cid in cids
                              if (v := f.columns[cid].feature_version) is not None},
            column_ids={names[cid]: cid for cid in cids},
        )  # fmt: skip
        if desc.feature_versions:
            self.lineage_files.append((f, new_id, cids, frag_path))
        return desc

    def _deletion(self, frag: FragmentRecord, mask: np.ndarray) -> None:
        current = self.dst.snap.deletion(frag.fragment_id)
        count = int(mask.sum())
        if count == 0:
            if current is not None:
                self.req.removed_deletions.append(current.vector_id)
            return
        replaces = None if current is None else current.vector_id
        self.req.deletions.append(
            NewDeletion(frag.fragment_id, frag.batch_id, count, encode_vector(mask), replaces)
        )

    def _theirs_cells(self, plan: Diff) -> None:
        """Conflicting cells of shared fragments take the source's file."""
        for c in plan.conflicts:
            if c.kind != "cell" or c.where not in self.dst.frags or c.column_id is None:
                continue
            cells = self.src.cells(c.where)
            if c.column_id in cells:  # (a cell the source lost stays the target's)
                self._adopt(self.dst.frags[c.where], cells[c.column_id], [c.column_id])

    def _lineage(self) -> None:
        """Derived columns of the adopted files keep their lineage (and the run that computed
        them); an input file the merge also adopted is named by its new id, so the output is not
        reported stale."""
        if not self.lineage_files:
            return
        rows = self.ctx.catalog.lineage_of(
            self.ctx.record, sorted({f.file_id for f, _, _, _ in self.lineage_files})
        )
        by_file: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_file.setdefault(r["file_id"], []).append(r)
        for f, new_id, cids, frag_path in self.lineage_files:
            for r in by_file.get(f.file_id, ()):
                if int(r["column_id"]) not in cids:
                    continue
                inputs = [
                    {**i, "file_id": self.file_ids.get(
                        (frag_path, i.get("file_id"), i.get("column")), i.get("file_id"))}
                    for i in r["inputs"]
                ]  # fmt: skip
                self.req.lineage.append(
                    LineageEntry(new_id, self.names[int(r["column_id"])], r["feature"],
                                 r["feature_version"], inputs, r["engine"], int(r["error_count"]),
                                 r["run_id"] or None)
                )  # fmt: skip


def _conflict_batches(plan: Diff) -> list[str]:
    return sorted({c.where for c in plan.conflicts if c.kind == "batch"})
