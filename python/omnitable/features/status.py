"""``Table.status()`` (batch x derived-column grid) and ``Table.lineage()``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omnitable.catalog.snapshot import Snapshot
from omnitable.features.definition import MODEL_OPTION, Feature
from omnitable.features.state import (
    BatchState,
    batch_state,
    fragment_status,
    load_read_sets,
)

if TYPE_CHECKING:
    import pandas as pd

    from omnitable.context import TableContext

_SYMBOL = {"done": "done", "stale": "STALE", "missing": "-", "partial": "partial"}


@dataclass
class StatusGrid:
    """State of every derived column for every batch: done / stale / missing / partial.

    ``errors`` counts records that failed a feature (filled in once error tables exist).
    """

    table: str
    version: int
    batches: list[str]
    columns: list[str]
    feature_of: dict[str, str]  # column -> feature@version
    cells: dict[tuple[str, str], BatchState]
    errors: dict[tuple[str, str], int]

    def state(self, batch: str, column: str) -> BatchState:
        return self.cells[(batch, column)]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [[self.cells[(b, c)] for c in self.columns] for b in self.batches],
            index=pd.Index(self.batches, name="batch"),
            columns=self.columns,
        )

    def __str__(self) -> str:
        head = ["batch"] + [f"{c} ({self.feature_of[c]})" for c in self.columns]
        rows = [
            [b] + [_cell(self.cells[(b, c)], self.errors.get((b, c), 0)) for c in self.columns]
            for b in self.batches
        ]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        out = [f"Status of '{self.table}' at version {self.version}", fmt.format(*head)]
        out += [fmt.format(*r) for r in rows]
        if not self.columns:
            out.append("(no registered features)")
        return "\n".join(out)

    __repr__ = __str__


def _cell(state: str, errors: int) -> str:
    return _SYMBOL[state] + (f" ({errors} err)" if errors else "")


def status_grid(
    ctx: TableContext,
    snap: Snapshot,
    features: dict[str, Feature],
    file_errors: dict[tuple[str, int], int] | None = None,
) -> StatusGrid:
    """Grid of states; ``file_errors`` maps (file_id, column_id) to failed records."""
    columns: list[str] = []
    feature_of: dict[str, str] = {}
    cells: dict[tuple[str, str], BatchState] = {}
    batches = [b.name for b in snap.batches]
    read_sets = load_read_sets(ctx, snap)
    for f in sorted(features.values(), key=lambda x: x.name):
        states: dict[str, list[Any]] = {b: [] for b in batches}
        for frag in snap.live_fragments(None):  # a fully deleted fragment needs nothing
            states[frag.batch_name].append(fragment_status(snap, f, frag, read_sets).state)
        for out in f.outputs:
            columns.append(out)
            feature_of[out] = f.id
            for b in batches:
                cells[(b, out)] = batch_state(states[b])
    errors = _error_cells(snap, columns, file_errors or {})
    return StatusGrid(ctx.name, snap.version, batches, columns, feature_of, cells, errors)


def _error_cells(
    snap: Snapshot, columns: list[str], file_errors: dict[tuple[str, int], int]
) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    if not file_errors:
        return out
    ids = {c: snap.column(c).column_id for c in columns}
    for frag in snap.fragments:
        providers = snap.resolve(frag.fragment_id, list(ids.values()))
        for name, cid in ids.items():
            p = providers[cid]
            n = file_errors.get((p.file_id, cid), 0) if p is not None else 0
            if n:
                out[(frag.batch_name, name)] = out.get((frag.batch_name, name), 0) + n
    return out


@dataclass(frozen=True)
class LineageRecord:
    """Where one derived column's data in one fragment came from. ``model``: for a model
    feature, ``"model=name@version sha256=<hex>"`` from its registered definition (the feature
    version pins the model's hash), else None."""

    column: str
    batch: str
    fragment_id: str
    file: str
    version: int
    feature: str
    feature_version: str
    inputs: list[dict[str, Any]]
    run_id: str
    engine: str
    model: str | None = None


def _models(ctx: TableContext, feature: str) -> dict[str, str]:
    """Feature version -> ``model=name@version sha256=...`` for the model feature ``feature``."""
    out = {}
    for row in ctx.feature_rows(feature):
        options = row["definition"].get("options") or {}
        if options.get(MODEL_OPTION):
            out[row["version"]] = f"model={options[MODEL_OPTION]} sha256={options['model_sha256']}"
    return out


def lineage(
    ctx: TableContext, snap: Snapshot, column: str, batch: str | None
) -> list[LineageRecord]:
    col = snap.column(column)
    frags = {f.fragment_id: f for f in snap.fragments_of([batch] if batch else None)}
    rows = ctx.catalog.column_lineage(ctx.record, snap, col.column_id)
    models = _models(ctx, col.feature) if col.feature else {}
    out = []
    for r in rows:
        frag = frags.get(r["fragment_id"])
        if frag is None:
            continue
        provider = snap.resolve(frag.fragment_id, [col.column_id])[col.column_id]
        if provider is None or provider.file_id != r["file_id"]:
            continue  # superseded by a newer file
        out.append(
            LineageRecord(
                column,
                frag.batch_name,
                frag.fragment_id,
                r["path"],
                r["added_version"],
                r["feature"],
                r["feature_version"],
                r["inputs"],
                r["run_id"],
                r["engine"],
                models.get(r["feature_version"]),
            )
        )
    order = {f.fragment_id: i for i, f in enumerate(snap.fragments)}
    return sorted(out, key=lambda x: order[x.fragment_id])
