"""The checks of a merge that read data (docs/branches.md, "Merging"): rows one branch deleted
while the other changed their values, and keys both branches inserted into a keyed table."""

from __future__ import annotations

import math

import numpy as np

from omnitable.context import TableContext
from omnitable.dataops.merge_plan import Conflict, Diff, View
from omnitable.format.keyindex import FragmentSlot, load_key_index, probe_fragments
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.keys import table_key


def check_rows(ctx: TableContext, plan: Diff, base: View, src: View, dst: View) -> list[Conflict]:
    """A row deleted on one side is a conflict where the other side changed its value in a
    cell (an update), not where it only rewrote the cell with the same value."""
    out = []
    for path, side, cid, rows in plan.row_checks:
        changed_view = dst if side == "source" else src
        if cid not in changed_view.columns:
            continue
        now = _values(ctx, changed_view, path, cid, rows)
        was = _values(ctx, base, path, cid, rows) if cid in base.columns else [None] * len(rows)
        differ = [int(r) for r, a, b in zip(rows, now, was, strict=True) if not _same(a, b)]
        if differ:
            name = dst.columns[cid].name if cid in dst.columns else changed_view.columns[cid].name
            deleted, updated = (
                ("deleted", "updated") if side == "source" else ("updated", "deleted")
            )
            out.append(Conflict("rows", path, name, deleted, updated, cid, tuple(differ)))
    return out


def _values(ctx: TableContext, view: View, path: str, cid: int, rows: np.ndarray) -> list[object]:
    name = view.columns[cid].name
    if view.columns[cid].state != "active":
        return [None] * len(rows)
    reader = FragmentReader(ctx.location, view.snap)
    return reader.read_rows(view.frags[path], [name], rows).column(0).to_pylist()


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def check_keys(ctx: TableContext, plan: Diff, base: View, src: View, dst: View) -> list[Conflict]:
    """In a keyed table, the live keys of the batches the source brings in must not be keys of
    rows the target inserted since the base. The source rows holding such keys are recorded in
    ``plan.key_drops`` (by fragment path)."""
    if table_key(ctx.record.properties) is None or not plan.copy_batches:
        return []
    added = [p for p in dst.frags if p not in base.frags]
    if not added:
        return []
    slots = []
    for path in added:
        frag, mask = dst.frags[path], dst.mask(path)
        slots.append(FragmentSlot(path, frag.row_count, mask if mask.any() else None))
    out = []
    for name in plan.copy_batches:
        taken = 0
        for path in src.batches[name]:
            offsets, q1, q2 = _live_keys(ctx, src, path)
            where, _ = probe_fragments(ctx.location, slots, q1, q2)
            hit = offsets[where >= 0]
            if len(hit):
                plan.key_drops[path] = hit
                taken += len(hit)
        if taken:
            out.append(Conflict("key", name, None, f"{taken} key(s) inserted", "inserted too"))
    return out


def _live_keys(ctx: TableContext, view: View, path: str) -> tuple[np.ndarray, ...]:
    """The offsets and key hashes of the live rows of the fragment at ``path``."""
    index = load_key_index(ctx.location, path, view.frags[path].row_count)
    live = ~view.mask(path)[index.offset]
    return index.offset[live], index.h1[live], index.h2[live]
