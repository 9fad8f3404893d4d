"""The catalog side of merging branches (docs/branches.md, "Merging"): the merge base of two
branches, and the fast-forward, which re-labels the source's rows as the target's (no row is
copied, no data file is touched)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text

from omnitable._failpoints import failpoint
from omnitable.catalog.records import TableRecord
from omnitable.catalog.refs import BRANCH_TABLES, get_ref
from omnitable.catalog.snapshot import REMOVABLE_ID, Segment, segments_for, within_clause
from omnitable.exceptions import CommitConflict

MERGE_OP = "merge"


def merge_base(conn: Connection, table: TableRecord, source: str, target: str) -> tuple[str, int]:
    """``(branch, version)`` naming the newest state both branches contain: their common
    ancestor, or the source state an earlier merge of one into the other brought in, whichever
    is newer (the version of that state is in the branch's history)."""
    s_segs, _, _ = segments_for(conn, table, branch=source)
    t_segs, _, _ = segments_for(conn, table, branch=target)
    t_upto = dict(t_segs)
    best: tuple[str, int] | None = None
    for branch, upto in s_segs:  # the nearest branch both see
        if branch in t_upto:
            best = (branch, min(upto, t_upto[branch]))
            break
    assert best is not None, "every branch descends from main"
    for segs, frm in ((t_segs, source), (s_segs, target)):
        for version in _merged_versions(conn, table, segs, frm):
            if version > best[1]:
                best = (frm, version)
    return best


def _merged_versions(
    conn: Connection, table: TableRecord, segs: list[Segment], source: str
) -> list[int]:
    """The source versions that merges recorded in ``segs``' history brought from ``source``."""
    params: dict[str, Any] = {"t": table.table_id, "op": MERGE_OP}
    within = within_clause("version", segs, params)
    rows = conn.execute(
        text(f"SELECT summary FROM commits WHERE table_id = :t AND op = :op AND {within}"),
        params,
    )
    out = []
    for r in rows:
        summary = json.loads(r.summary)
        if summary.get("source") == source and "source_version" in summary:
            out.append(int(summary["source_version"]))
    return out


def can_fast_forward(conn: Connection, table: TableRecord, source: str, target: str) -> bool:
    """Whether ``source`` forked from ``target`` and ``target`` has not moved since."""
    ref = get_ref(conn, table, source, "branch")
    head = segments_for(conn, table, branch=target)[1]
    return ref.parent == target and ref.fork_version == head and ref.version > head


def fast_forward(
    conn: Connection, table: TableRecord, source: str, target: str, source_head: int
) -> int:
    """Make ``target``'s head the state of ``source``'s head by re-labelling the source's rows
    and commits as the target's; ``source`` then forks from the target at that head. Returns the
    target's new head.

    Raises:
        CommitConflict: the target moved or the source's head is not ``source_head`` any more.
    """
    if not can_fast_forward(conn, table, source, target):
        raise CommitConflict(
            f"Cannot fast-forward branch '{target}' to '{source}': '{target}' moved since "
            f"'{source}' forked; nothing was committed"
        )
    if get_ref(conn, table, source, "branch").version != source_head:
        raise CommitConflict(
            f"Cannot fast-forward branch '{target}': '{source}' moved from version {source_head} "
            "while the merge was planned; nothing was committed"
        )
    t = table.table_id
    for kind, id_expr in REMOVABLE_ID.items():
        _settle_removals(conn, t, kind, id_expr.format(a=kind), source, target)
    for name in BRANCH_TABLES:
        conn.execute(
            text(f"UPDATE {name} SET branch = :target WHERE table_id = :t AND branch = :source"),
            {"t": t, "source": source, "target": target},
        )
        failpoint("fast_forward.mid_update")
    conn.execute(
        text("UPDATE refs SET version = :v WHERE table_id = :t AND name = :n"),
        {"v": source_head, "t": t, "n": target},
    )
    conn.execute(
        text("UPDATE refs SET fork_version = :v WHERE table_id = :t AND name = :n"),
        {"v": source_head, "t": t, "n": source},
    )
    conn.execute(  # tags and branches of the source's versions: those versions are the target's
        text("UPDATE refs SET parent_branch = :target WHERE table_id = :t AND parent_branch = :s"),
        {"target": target, "t": t, "s": source},
    )
    return source_head


def _settle_removals(
    conn: Connection, t: str, kind: str, row_id: str, source: str, target: str
) -> None:
    """The source's removals of the target's own rows become those rows' removed_version; its
    removals of rows of the target's ancestors stay removals (re-labelled with the rest)."""
    match = (
        f"x.table_id = {kind}.table_id AND x.kind = :k AND x.row_id = {row_id} AND "
        f"x.row_version = {kind}.added_version AND x.branch = :s"
    )
    params = {"t": t, "k": kind, "s": source, "target": target}
    conn.execute(
        text(
            f"UPDATE {kind} SET removed_version = (SELECT x.version FROM removals x WHERE {match}) "
            f"WHERE table_id = :t AND branch = :target AND removed_version IS NULL AND "
            f"EXISTS (SELECT 1 FROM removals x WHERE {match})"
        ),
        params,
    )
    own = REMOVABLE_ID[kind].format(a="r")
    conn.execute(
        text(
            "DELETE FROM removals WHERE table_id = :t AND kind = :k AND branch = :s AND EXISTS "
            f"(SELECT 1 FROM {kind} r WHERE r.table_id = removals.table_id AND {own} = "
            "removals.row_id AND r.added_version = removals.row_version AND r.branch = :target)"
        ),
        params,
    )
