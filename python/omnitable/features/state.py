"""Column state, derived from the catalog (DESIGN §4 invariant 4): never stored, always computed.

A feature F@v is **done** in a fragment when every output column is provided by a visible file
whose ``feature_version`` is v, every input file its lineage records (its read set) is still the
input's providing file, and no input column's providing file is newer than the outputs'. It is
**stale** when the outputs exist but were computed by another version or from inputs that were
recomputed since, and **missing** when some output has no file in the fragment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.features.definition import Feature

if TYPE_CHECKING:
    from omnitable.context import TableContext

FragmentState = Literal["done", "stale", "missing"]
BatchState = Literal["done", "stale", "missing", "partial"]


@dataclass(frozen=True)
class FragmentStatus:
    state: FragmentState
    reason: str


ReadSets = Mapping[str, Mapping[str, "str | None"]]  # file id -> input column -> input file id


def load_read_sets(ctx: TableContext, snap: Snapshot) -> dict[str, dict[str, str | None]]:
    """Read set of every visible derived file, from its lineage: input column -> input file."""
    return ctx.catalog.read_sets(ctx.record, snap)


def fragment_status(
    snap: Snapshot, f: Feature, frag: FragmentRecord, read_sets: ReadSets | None = None
) -> FragmentStatus:
    """State of feature ``f`` (at its current version) in one fragment; ``read_sets`` (from
    :func:`load_read_sets`) adds the lineage check."""
    by_name = {c.name: c for c in snap.columns}
    out_ids = [by_name[o].column_id for o in f.outputs if o in by_name]
    if len(out_ids) != len(f.outputs):
        return FragmentStatus("missing", "output column not in this snapshot")
    in_ids = [by_name[i].column_id for i in f.inputs if i in by_name]
    providers = snap.resolve(frag.fragment_id, out_ids + in_ids)
    outs = [providers[c] for c in out_ids]
    if any(p is None for p in outs):
        return FragmentStatus("missing", "not computed")
    versions = {p.columns[c].feature_version for p, c in zip(outs, out_ids, strict=True) if p}
    if versions != {f.version}:
        found = ", ".join(sorted(str(v) for v in versions))
        return FragmentStatus("stale", f"computed by version {found}, current is {f.version}")
    computed_at = min(p.added_version for p in outs if p is not None)
    in_names = [i for i in f.inputs if i in by_name]
    for name, cid in zip(in_names, in_ids, strict=True):
        p = providers[cid]
        if p is not None and p.added_version > computed_at:
            return FragmentStatus("stale", f"input '{name}' changed at version {p.added_version}")
        for out in outs:
            read = (read_sets or {}).get(out.file_id if out else "", {})
            if name in read and read[name] != (p.file_id if p else None):
                return FragmentStatus(
                    "stale", f"input '{name}' was recomputed after this was computed (lineage)"
                )
    return FragmentStatus("done", f"computed at version {computed_at}")


def batch_state(states: list[FragmentState]) -> BatchState:
    counts = Counter(states)
    if not states or counts["done"] == len(states):
        return "done"
    if counts["missing"] == len(states):
        return "missing"
    if counts["missing"] == 0 and counts["done"] == 0:
        return "stale"
    return "partial"
