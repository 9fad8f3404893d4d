"""Backfill planning: the minimal missing closure, fused into steps, explained before running.

For target features and batches, walk the dependency graph in topological order and decide per
fragment: a feature is recomputed where it is missing or stale, or where one of its inputs is
being recomputed; everything else is reused. Features of the same level that share input columns
are fused into one step (one scan of the shared inputs, one Spark job). Columns outside the
targets' closure are never touched.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import NotFoundError, ValidationError
from omnitable.features.definition import Feature
from omnitable.features.graph import FeatureGraph
from omnitable.features.state import BatchState, batch_state, fragment_status, load_read_sets

if TYPE_CHECKING:
    from omnitable.context import TableContext


@dataclass
class Step:
    """One fused group of features of one level: one scan of ``inputs``, one Spark job."""

    level: int
    features: list[Feature]
    inputs: list[str]
    work: dict[str, list[FragmentRecord]]  # feature name -> fragments to compute
    estimated_input_bytes: int = 0
    # feature name -> fragment id -> file whose failed records are recomputed (retry_errors)
    retry: dict[str, dict[str, str]] = field(default_factory=dict)
    # what the plan decided on, checked again by each chunk's commit: output column -> its
    # column id, and (fragment id, output column) -> the file providing it (None: missing)
    column_ids: dict[str, int] = field(default_factory=dict)
    targets: dict[tuple[str, str], str | None] = field(default_factory=dict)

    @property
    def fragments(self) -> list[FragmentRecord]:
        seen: dict[str, FragmentRecord] = {}
        for frags in self.work.values():
            for f in frags:
                seen.setdefault(f.fragment_id, f)
        return list(seen.values())

    @property
    def pandas_inputs(self) -> list[str]:
        """The columns the step's pandas features read, in the order of :attr:`inputs`."""
        wanted = {c for f in self.features if f.kind == "pandas" for c in f.inputs}
        return [c for c in self.inputs if c in wanted]

    @property
    def engine(self) -> str:
        kinds = {f.kind for f in self.features}
        return "spark-sql" if kinds == {"sql"} else "pandas" if kinds == {"pandas"} else "mixed"


@dataclass(frozen=True)
class Reuse:
    feature: str
    batch: str
    reason: str


@dataclass
class Plan:
    """What a backfill will do: data only (running it is :mod:`omnitable.exec.backfill`)."""

    table_name: str
    base_version: int
    targets: list[str]
    batches: list[str]
    steps: list[Step]
    reused: list[Reuse]
    states: dict[tuple[str, str], BatchState] = field(default_factory=dict)
    recompute_reasons: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.steps

    def explain(self) -> str:
        """Human-readable plan: steps in dependency order, fusion, reuse and why, input bytes."""
        lines = [
            f"Backfill plan for table '{self.table_name}' at version {self.base_version}",
            f"  targets: {', '.join(self.targets)}",
            f"  batches: {', '.join(self.batches) or '(none)'}",
        ]
        if not self.steps:
            lines.append("  nothing to do: every target is done for these batches")
        produced_by: dict[str, int] = {}
        for i, step in enumerate(self.steps, 1):
            names = ", ".join(f.id for f in step.features)
            fused = f"fused x{len(step.features)}: " if len(step.features) > 1 else ""
            lines.append(f"  step {i}: level {step.level}, {step.engine}, {fused}{names}")
            fresh = sorted({produced_by[c] for c in step.inputs if c in produced_by})
            size = f"~{_fmt_bytes(step.estimated_input_bytes)} of existing files"
            if fresh:
                size += " + outputs of step " + ", ".join(str(k) for k in fresh)
            lines.append(
                f"    scan {', '.join(step.inputs)} once for {len(step.fragments)} fragment(s), "
                f"{size}"
            )
            for f in step.features:
                for out in f.outputs:
                    produced_by[out] = i
            for f in step.features:
                per_batch: dict[str, int] = defaultdict(int)
                for frag in step.work[f.name]:
                    per_batch[frag.batch_name] += 1
                detail = "; ".join(
                    f"{b} ({n} fragment{'s' if n != 1 else ''}: "
                    f"{self.recompute_reasons.get((f.name, b), 'missing')})"
                    for b, n in per_batch.items()
                )
                lines.append(f"    {f.name} -> {', '.join(f.outputs)}: {detail}")
        if self.reused:
            lines.append("  reused (not recomputed):")
            grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
            for r in self.reused:
                grouped[(r.feature, r.reason)].append(r.batch)
            for (feature, reason), batches in grouped.items():
                lines.append(f"    {feature}: {', '.join(batches)} — {reason}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()


def make_plan(
    ctx: TableContext,
    graph: FeatureGraph,
    snap: Snapshot,
    targets: list[str],
    batches: list[str] | None,
    retry_errors: bool = False,
    error_counts: dict[tuple[str, int], int] | None = None,
) -> Plan:
    """Plan the minimal work to bring ``targets`` up to date on ``batches`` (default: all).

    With ``retry_errors``, done fragments whose current file has failed records (per
    ``error_counts``: (file_id, column_id) -> count) recompute just those records.
    """
    by_name = {c.name: c for c in snap.columns}
    retry: dict[str, dict[str, str]] = {}
    target_features = _resolve_targets(ctx, graph, targets)
    fragments = snap.live_fragments(batches)  # a fully deleted fragment needs nothing
    batch_names = [b.name for b in snap.batches if batches is None or b.name in set(batches)]
    closure = graph.ancestors(target_features)
    levels = graph.levels()
    recompute: dict[str, list[FragmentRecord]] = {}
    recompute_ids: dict[str, set[str]] = {}
    plan = Plan(ctx.name, snap.version, target_features, batch_names, [], [])
    read_sets = load_read_sets(ctx, snap)
    for name in graph.topological(closure):
        f = graph.features[name]
        deps = graph.deps(name)
        todo: list[FragmentRecord] = []
        per_batch: dict[str, list[str]] = defaultdict(list)
        reasons: dict[str, str] = {}
        for frag in fragments:
            st = fragment_status(snap, f, frag, read_sets)
            per_batch[frag.batch_name].append(st.state)
            upstream = [d for d in deps if frag.fragment_id in recompute_ids.get(d, set())]
            if st.state != "done":
                todo.append(frag)
                reasons.setdefault(frag.batch_name, st.reason if st.state == "stale" else "missing")
            elif upstream:
                todo.append(frag)
                reasons.setdefault(
                    frag.batch_name, f"input from {', '.join(sorted(upstream))} is recomputed"
                )
            elif retry_errors and error_counts:
                col = by_name[next(iter(f.outputs))]
                provider = snap.resolve(frag.fragment_id, [col.column_id])[col.column_id]
                failed = error_counts.get((provider.file_id, col.column_id), 0) if provider else 0
                if failed and provider is not None:
                    todo.append(frag)
                    retry.setdefault(name, {})[frag.fragment_id] = provider.file_id
                    reasons.setdefault(frag.batch_name, f"retry {failed} failed record(s)")
        for b in batch_names:
            plan.states[(name, b)] = batch_state(per_batch.get(b, []))  # type: ignore[arg-type]
            if b in reasons:
                plan.recompute_reasons[(name, b)] = reasons[b]
            else:
                plan.reused.append(Reuse(f.id, b, "done (all fragments current)"))
        if todo:
            recompute[name] = todo
            recompute_ids[name] = {x.fragment_id for x in todo}
    plan.steps = _fuse(graph, levels, recompute, snap)
    for step in plan.steps:
        step.retry = {n: retry[n] for n in step.work if n in retry}
        _record_targets(snap, step)
    return plan


def _record_targets(snap: Snapshot, step: Step) -> None:
    """Remember the output column ids and the files providing them that ``step`` replaces."""
    by_name = {c.name: c for c in snap.columns}
    for f in step.features:
        outs = [o for o in f.outputs if o in by_name]
        step.column_ids.update({o: by_name[o].column_id for o in outs})
        for frag in step.work[f.name]:
            providers = snap.resolve(frag.fragment_id, [by_name[o].column_id for o in outs])
            for o in outs:
                p = providers[by_name[o].column_id]
                step.targets[(frag.fragment_id, o)] = p.file_id if p else None


def _check_not_retired(ctx: TableContext, target: str) -> None:
    _, columns = ctx.all_columns()
    if any(c.state != "active" and target in (c.name, c.feature) for c in columns):
        raise NotFoundError(
            f"Cannot backfill '{target}' on table '{ctx.name}': it is retired; restore it first "
            "(Table.restore)"
        )


def _resolve_targets(ctx: TableContext, graph: FeatureGraph, targets: list[str]) -> list[str]:
    if isinstance(targets, str):
        targets = [targets]
    if not targets:
        raise ValidationError("Cannot plan a backfill: give at least one target feature or column")
    out = []
    for t in targets:
        if t in graph.features:
            name = t
        elif t in graph.producer:
            name = graph.producer[t]
        else:
            _check_not_retired(ctx, t)
            raise NotFoundError(
                f"Cannot backfill '{t}' on table '{ctx.name}': no registered feature or output "
                f"column of that name; registered features: {', '.join(sorted(graph.features)) or 'none'}"
            )
        if name not in out:
            out.append(name)
    return out


def _fuse(
    graph: FeatureGraph,
    levels: dict[str, int],
    recompute: dict[str, list[FragmentRecord]],
    snap: Snapshot,
) -> list[Step]:
    """Group the features of each level that share input columns (union-find over inputs)."""
    steps: list[Step] = []
    by_level: dict[int, list[str]] = defaultdict(list)
    for name in recompute:
        by_level[levels[name]].append(name)
    for level in sorted(by_level):
        names = sorted(by_level[level])
        parent = {n: n for n in names}
        owner: dict[str, str] = {}
        for n in names:
            for col in graph.features[n].inputs:
                if col in owner:
                    parent[_find(parent, n)] = _find(parent, owner[col])
                else:
                    owner[col] = n
        groups: dict[str, list[str]] = defaultdict(list)
        for n in names:
            groups[_find(parent, n)].append(n)
        for members in sorted(groups.values()):
            feats = [graph.features[n] for n in members]
            inputs: list[str] = []
            for f in feats:
                inputs.extend(i for i in f.inputs if i not in inputs)
            step = Step(level, feats, inputs, {n: recompute[n] for n in members})
            step.estimated_input_bytes = _estimate_bytes(snap, step)
            steps.append(step)
    return steps


def _find(parent: dict[str, str], n: str) -> str:
    while parent[n] != n:
        parent[n] = parent[parent[n]]
        n = parent[n]
    return n


def _estimate_bytes(snap: Snapshot, step: Step) -> int:
    by_name = {c.name: c for c in snap.columns}
    ids = [by_name[i].column_id for i in step.inputs if i in by_name]
    total = 0.0
    for frag in step.fragments:
        for f in snap.resolve(frag.fragment_id, ids).values():
            if f is not None:
                total += f.size_bytes / max(1, len(f.columns))
    return int(total)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"
