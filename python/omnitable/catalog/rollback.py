"""Rollback: one commit that makes an older version's state the head (docs/dataops.md).

Applied inside the commit transaction (:func:`omnitable.catalog.commit.commit`) from the two
snapshots, target and head. Rows visible at the head but not at the target get
``removed_version``; rows visible at the target but not at the head come back as copies added by
the rollback commit, because a row's removal is part of history (time travel to the versions in
between still sees it removed):

- columns: the target's row of each column (same ``column_id``; the key includes
  ``added_version``);
- batches and fragments: copies under new ids (their files and deletion vectors follow);
- files: a copy of every file that *provided* a column at the target, carrying only the columns
  it provided then (a set of its own), so the newest-file-wins rule picks exactly the target's
  providers; lineage rows are copied with them;
- deletion vectors: the target's vector of every fragment whose vector differs;
- features: the version current at the target is made current again.

Nothing in storage is written or deleted; every data file the target read is still there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.features import feature_rows
from omnitable.catalog.records import FileRecord, TableRecord
from omnitable.catalog.removals import end_rows
from omnitable.catalog.sets import ColumnSet, insert_missing_sets
from omnitable.catalog.snapshot import Segment, Snapshot, all_columns, load_snapshot
from omnitable.catalog.sql import in_list
from omnitable.exceptions import CommitConflict


def apply_rollback(
    conn: Connection, table: TableRecord, branch: str, target: int, version: int
) -> dict[str, int]:
    """Make the state of ``target`` the state of the new ``version`` on ``branch``; returns
    counts of what changed (for the commit summary)."""
    t = table.table_id
    old = load_snapshot(conn, table, version=target)
    head = load_snapshot(conn, table, branch=branch)
    ctx = _Rollback(conn, t, branch, version, head.segments)
    ctx.columns(old, head)
    batch_ids = ctx.copy_rows("batches", "batch_id", _gone(old.batches, head.batches, "batch_id"))
    ctx.remove("batches", "batch_id", _gone(head.batches, old.batches, "batch_id"))
    frag_ids = ctx.copy_rows(
        "fragments", "fragment_id", _gone(old.fragments, head.fragments, "fragment_id"),
        {"batch_id": batch_ids},
    )  # fmt: skip
    removed_frags = _gone(head.fragments, old.fragments, "fragment_id")
    ctx.remove("fragments", "fragment_id", removed_frags)
    ctx.remove_by_fragment(removed_frags)
    files = ctx.files(old, head, frag_ids)
    vectors = ctx.vectors(old, head, frag_ids, batch_ids)
    ctx.features(old.segments)
    return {"batches": len(batch_ids), "fragments": len(frag_ids), "files": files,
            "vectors": vectors}  # fmt: skip


def _gone(have: list[Any], other: list[Any], key: str) -> list[str]:
    """Ids in ``have`` that ``other`` lacks."""
    theirs = {getattr(x, key) for x in other}
    return [getattr(x, key) for x in have if getattr(x, key) not in theirs]


class _Rollback:
    """The statements of one rollback (inside its commit transaction)."""

    def __init__(
        self, conn: Connection, t: str, branch: str, version: int, segments: list[Segment]
    ) -> None:
        self.conn, self.t, self.branch, self.version = conn, t, branch, version
        self.segments = segments  # the branch head's

    def remove(self, table: str, id_col: str, ids: Sequence[str | int]) -> None:
        """End the visible rows of ``table`` whose ``id_col`` is in ``ids`` at this version."""
        end_rows(self.conn, self.t, table, id_col, ids, self.branch, self.version, self.segments)

    def remove_by_fragment(self, fragment_ids: list[str]) -> None:
        for table in ("files", "deletion_vectors"):
            self.remove(table, "fragment_id", fragment_ids)

    def rows(self, table: str, id_col: str, ids: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(ids), 500):
            params: dict[str, Any] = {"t": self.t}
            where = in_list(id_col, "rid", ids[i : i + 500], params)
            out += [
                dict(r._mapping)
                for r in self.conn.execute(
                    text(f"SELECT * FROM {table} WHERE table_id = :t AND {where}"), params
                )
            ]
        return out

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            names = list(rows[0])
            self.conn.execute(
                text(
                    f"INSERT INTO {table} ({', '.join(names)}) "
                    f"VALUES ({', '.join(':' + n for n in names)})"
                ),
                rows,
            )

    def copy_rows(
        self,
        table: str,
        id_col: str,
        ids: list[str],
        remap: dict[str, dict[str, str]] | None = None,
    ) -> dict[str, str]:
        """Copies of rows ``ids`` under new ids, added by this commit; returns old -> new id."""
        mapping = {i: uuid.uuid4().hex for i in ids}
        rows = []
        for row in self.rows(table, id_col, ids):
            row.update(self._fresh(), **{id_col: mapping[row[id_col]]})
            for col, ids_map in (remap or {}).items():
                row[col] = ids_map.get(row[col], row[col])
            rows.append(row)
        self.insert(table, rows)
        return mapping

    def _fresh(self) -> dict[str, Any]:
        return {"branch": self.branch, "added_version": self.version, "removed_version": None}

    def columns(self, old: Snapshot, head: Snapshot) -> None:
        """Each column's row at the target (retired ones too) is its row again."""
        then = {c.column_id: c for c in all_columns(self.conn, old.table, old.segments)}
        now = {c.column_id: c for c in all_columns(self.conn, head.table, head.segments)}
        for cid, col in now.items():
            if cid not in then or then[cid].added_version != col.added_version:
                self.remove("columns", "column_id", [cid])
        back = [
            c
            for cid, c in then.items()
            if cid not in now or now[cid].added_version != c.added_version
        ]
        for col in back:
            _copy_column(self, col.column_id, col.added_version)

    def files(self, old: Snapshot, head: Snapshot, frag_ids: dict[str, str]) -> int:
        """Remove the head's files the target did not have; copy the target's providers that
        the head lacks (or whose fragment was copied), each with the columns it provided."""
        then = {f.file_id: f for fs in old.files_by_fragment.values() for f in fs}
        now = {f.file_id for fs in head.files_by_fragment.values() for f in fs}
        self.remove("files", "file_id", sorted(now - set(then)))
        provided = _providers(old)
        copies = {
            fid: cids
            for fid, cids in provided.items()
            if fid not in now or then[fid].fragment_id in frag_ids
        }
        return self.copy_files(then, copies, frag_ids)

    def copy_files(
        self, files: dict[str, FileRecord], copies: dict[str, set[int]], frag_ids: dict[str, str]
    ) -> int:
        """Copies of ``files`` (id -> the column ids each keeps), added by this commit, with
        their lineage; fragments remapped by ``frag_ids``."""
        mapping = {fid: uuid.uuid4().hex for fid in copies}
        sets, rows = [], []
        for row in self.rows("files", "file_id", sorted(copies)):
            f = files[row["file_id"]]
            column_set = ColumnSet.of({c: f.columns[c].feature_version for c in copies[f.file_id]})
            sets.append(column_set)
            row.update(self._fresh(), file_id=mapping[f.file_id], set_id=column_set.set_id,
                       fragment_id=frag_ids.get(f.fragment_id, f.fragment_id),
                       stats=_restricted_stats(f, column_set))  # fmt: skip
            rows.append(row)
        insert_missing_sets(self.conn, self.t, sets)
        self.insert("files", rows)
        self._copy_lineage(mapping, copies)
        return len(rows)

    def _copy_lineage(self, mapping: dict[str, str], copies: dict[str, set[int]]) -> None:
        rows = []
        for row in self.rows("lineage", "file_id", sorted(mapping)):
            if int(row["column_id"]) in copies[row["file_id"]]:
                row["file_id"] = mapping[row["file_id"]]
                rows.append(row)
        self.insert("lineage", rows)

    def vectors(
        self, old: Snapshot, head: Snapshot, frag_ids: dict[str, str], batch_ids: dict[str, str]
    ) -> int:
        """Every fragment of the target gets its vector at the target back (none: none)."""
        changed = []
        for frag in old.fragments:
            before = old.deletion(frag.fragment_id)
            after = head.deletion(frag.fragment_id)
            copied = frag.fragment_id in frag_ids
            if copied or (before and before.vector_id) != (after and after.vector_id):
                if after is not None and not copied:
                    self.remove("deletion_vectors", "vector_id", [after.vector_id])
                if before is not None:
                    changed.append(before.vector_id)
        self.copy_rows(
            "deletion_vectors",
            "vector_id",
            changed,
            {"fragment_id": frag_ids, "batch_id": batch_ids},
        )
        return len(changed)

    def unregister(self, reverted: int, parent: list[Segment]) -> None:
        """Feature versions registered by commit ``reverted`` and still current give way to
        the version current at its parent (``parent``: its segments; a feature new in it has
        its outputs removed, which makes it not current)."""
        then = self._current(parent)
        for name, (registered, _) in self._current(self.segments).items():
            if registered == reverted and name in then:
                self._make_current(name, then[name][1])

    def _current(self, segments: list[Segment]) -> dict[str, tuple[int, str]]:
        """Feature name -> (registered_version, version) of its current row in ``segments``."""
        out: dict[str, tuple[int, str]] = {}
        for r in feature_rows(self.conn, self.t, segments):
            out[r["name"]] = (int(r["registered_version"]), r["version"])
        return out

    def _make_current(self, name: str, version: str) -> None:
        """A new row for ``version`` of feature ``name`` (a copy of its first registration),
        registered by this commit on this branch."""
        self.conn.execute(
            text(
                "INSERT INTO features (table_id, name, version, kind, definition, fingerprint, "
                "registered_at, registered_version, branch) SELECT table_id, name, version, kind, "
                "definition, fingerprint, registered_at, :v, :b FROM features WHERE table_id = :t "
                "AND name = :n AND version = :fv AND registered_version = (SELECT "
                "MIN(registered_version) FROM features WHERE table_id = :t AND name = :n AND "
                "version = :fv)"
            ),
            {"v": self.version, "b": self.branch, "t": self.t, "n": name, "fv": version},
        )

    def features(self, target: list[Segment]) -> None:
        """The version of each feature that was current at the target (``target``: its
        segments) is current again."""
        current = self._current(self.segments)
        for name, (_, version) in self._current(target).items():
            if current[name][1] != version:
                self._make_current(name, version)


def _providers(snap: Snapshot) -> dict[str, set[int]]:
    """File id -> the column ids it provides in ``snap`` (newest file wins)."""
    ids = sorted({cid for fs in snap.files_by_fragment.values() for f in fs for cid in f.columns})
    out: dict[str, set[int]] = {}
    for frag in snap.fragments:
        for cid, f in snap.resolve(frag.fragment_id, ids).items():
            if f is not None:
                out.setdefault(f.file_id, set()).add(cid)
    return out


def _restricted_stats(f: FileRecord, column_set: ColumnSet) -> str | None:
    """``f``'s statistics for the columns of ``column_set`` only, in its position order."""
    if f.stats_json is None:
        return None
    entries = json.loads(f.stats_json)
    return json.dumps([entries[f.columns[c].position] for c in column_set.column_ids],
                      separators=(",", ":"))  # fmt: skip


def apply_revert(
    conn: Connection, table: TableRecord, branch: str, reverted: int, version: int,
    dependents: str,
) -> dict[str, Any]:  # fmt: skip
    """Undo exactly commit ``reverted`` on ``branch`` as the new ``version``, keeping every later
    commit: what it added is removed, what it removed comes back (copies), its deletion vectors
    and column changes are undone, the feature versions it registered stop being current.

    Raises:
        CommitConflict: a later commit changed what it changed (same column of a fragment, the
            same fragment's deletion vector, the same column's name or state, a batch name it
            freed), or read a column it wrote while ``dependents`` is ``"fail"``.
    """
    parent = conn.execute(
        text("SELECT parent_version FROM commits WHERE table_id = :t AND version = :v"),
        {"t": table.table_id, "v": reverted},
    ).scalar_one()
    before = load_snapshot(conn, table, version=int(parent))
    after = load_snapshot(conn, table, version=reverted)
    head = load_snapshot(conn, table, branch=branch)
    diff = _Diff(before, after, head, reverted)
    diff.check_conflicts(conn)
    readers = diff.dependents(conn)
    if readers and dependents == "fail":
        raise CommitConflict(
            f"Cannot revert version {reverted} of table '{table.name}': later backfills read "
            f"what it wrote: feature(s) {', '.join(sorted(readers))}; nothing was committed. "
            "Pass dependents='stale' to revert anyway and leave them stale (then "
            f"Table.backfill({sorted(readers)!r}) recomputes them), or revert those commits "
            "first.",
            [("*", r) for r in sorted(readers)],
        )
    ctx = _Rollback(conn, table.table_id, branch, version, head.segments)
    counts = diff.apply(ctx)
    ctx.unregister(reverted, before.segments)
    return {**counts, "stale": sorted(readers)}


class _Diff:
    """What commit ``reverted`` changed (``before`` → ``after``), checked against ``head``."""

    def __init__(self, before: Snapshot, after: Snapshot, head: Snapshot, reverted: int) -> None:
        self.before, self.after, self.head, self.reverted = before, after, head, reverted
        self.files_before = {f.file_id: f for fs in before.files_by_fragment.values() for f in fs}
        self.files_after = {f.file_id: f for fs in after.files_by_fragment.values() for f in fs}
        self.files_head = {f.file_id for fs in head.files_by_fragment.values() for f in fs}
        self.added_files = set(self.files_after) - set(self.files_before)
        self.removed_files = set(self.files_before) - set(self.files_after)

    def _conflict(self, what: str) -> CommitConflict:
        return CommitConflict(
            f"Cannot revert version {self.reverted} of table '{self.head.table.name}': {what} "
            "after it; nothing was committed. Revert the later commit first, or roll back."
        )

    def check_conflicts(self, conn: Connection) -> None:
        """Everything the commit changed is still as it left it at the head."""
        self._check_fragments()
        self._check_files()
        self._check_vectors()
        cols_after, cols_head = _columns(conn, self.after), _columns(conn, self.head)
        for cid, row in _changed(_columns(conn, self.before), cols_after).items():
            if cols_head.get(cid) != row:
                raise self._conflict(f"column id {cid} was renamed, retired or replaced")
        mine = {b.name: b.batch_id for b in self.after.batches}
        gone = {b.name for b in self.before.batches if b.batch_id not in
                {x.batch_id for x in self.after.batches}}  # fmt: skip
        taken = sorted(
            b.name for b in self.head.batches if b.name in gone and mine.get(b.name) != b.batch_id
        )
        if taken:
            raise self._conflict(f"batch(es) {', '.join(taken)} were appended or replaced")

    def _check_fragments(self) -> None:
        """The fragments it added, wrote files to or deleted rows of are all still there."""
        touched = {self.files_after[f].fragment_id for f in self.added_files}
        touched |= set(_gone(self.after.fragments, self.before.fragments, "fragment_id"))
        touched |= {f for f in self._vector_changes()}
        gone = sorted(touched - {f.fragment_id for f in self.head.fragments})
        if gone:
            raise self._conflict(
                f"{len(gone)} fragment(s) it changed were replaced or removed (e.g. {gone[0]})"
            )

    def _check_files(self) -> None:
        """Every column it wrote is still provided by its file."""
        col_ids = sorted({c for f in self.added_files for c in self.files_after[f].columns})
        frags = sorted({self.files_after[f].fragment_id for f in self.added_files})
        for fid in frags:
            now = self.head.resolve(fid, col_ids)
            for cid, mine in self.after.resolve(fid, col_ids).items():
                if mine is None or mine.file_id not in self.added_files:
                    continue
                current = now[cid]
                if current is None or current.file_id != mine.file_id:
                    raise self._conflict(f"column id {cid} of fragment {fid} was written again")

    def _vector_changes(self) -> list[str]:
        """Fragments whose deletion vector the commit changed."""
        out = []
        for frag in self.after.fragments:
            a, b = self.after.deletion(frag.fragment_id), self.before.deletion(frag.fragment_id)
            if (a and a.vector_id) != (b and b.vector_id):
                out.append(frag.fragment_id)
        return out

    def _check_vectors(self) -> None:
        for fid in self._vector_changes():
            a, h = self.after.deletion(fid), self.head.deletion(fid)
            if (h and h.vector_id) != (a and a.vector_id):
                raise self._conflict(f"rows of fragment {fid} were deleted (or restored) again")

    def dependents(self, conn: Connection) -> set[str]:
        """Features whose files at the head read a file this commit added."""
        out: set[str] = set()
        if not self.added_files:
            return out
        params: dict[str, Any] = {"t": self.head.table.table_id}
        rows = conn.execute(
            text("SELECT file_id, feature, inputs FROM lineage WHERE table_id = :t"), params
        ).all()
        for file_id, feature, inputs in rows:
            later = file_id in self.files_head and file_id not in self.added_files
            if later and any(i.get("file_id") in self.added_files for i in json.loads(inputs)):
                out.add(feature)
        return out

    def apply(self, ctx: _Rollback) -> dict[str, int]:
        conn = ctx.conn
        before_cols, after_cols = _columns(conn, self.before), _columns(conn, self.after)
        for cid in _changed(before_cols, after_cols):
            ctx.remove("columns", "column_id", [cid])
            if cid in before_cols:
                _copy_column(ctx, cid, before_cols[cid][0])
        head_batches = {b.batch_id for b in self.head.batches}
        added_batches = _gone(self.after.batches, self.before.batches, "batch_id")
        ctx.remove("batches", "batch_id", [b for b in added_batches if b in head_batches])
        batch_ids = ctx.copy_rows(
            "batches", "batch_id", _gone(self.before.batches, self.after.batches, "batch_id")
        )
        added_frags = _gone(self.after.fragments, self.before.fragments, "fragment_id")
        ctx.remove("fragments", "fragment_id", added_frags)
        ctx.remove_by_fragment(added_frags)
        frag_ids = ctx.copy_rows(
            "fragments", "fragment_id", _gone(self.before.fragments, self.after.fragments, "fragment_id"),
            {"batch_id": batch_ids},
        )  # fmt: skip
        ctx.remove("files", "file_id", sorted(self.added_files & self.files_head))
        restored = _providers(self.before)
        copies = {f: cids for f, cids in restored.items() if f in self.removed_files}
        files = ctx.copy_files(self.files_before, copies, frag_ids)
        vectors = self._vectors(ctx, frag_ids, batch_ids)
        return {"batches": len(batch_ids), "fragments": len(frag_ids), "files": files,
                "vectors": vectors}  # fmt: skip

    def _vectors(self, ctx: _Rollback, frag_ids: dict[str, str], batch_ids: dict[str, str]) -> int:
        back = []
        for fid in self._vector_changes():
            a, b = self.after.deletion(fid), self.before.deletion(fid)
            if a is not None:
                ctx.remove("deletion_vectors", "vector_id", [a.vector_id])
            if b is not None:
                back.append(b.vector_id)
        for frag in self.before.fragments:  # vectors of fragments this commit removed
            b = self.before.deletion(frag.fragment_id)
            if b is not None and frag.fragment_id in frag_ids:
                back.append(b.vector_id)
        ctx.copy_rows("deletion_vectors", "vector_id", back,
                      {"fragment_id": frag_ids, "batch_id": batch_ids})  # fmt: skip
        return len(back)


def _columns(conn: Connection, snap: Snapshot) -> dict[int, tuple[int, str, str]]:
    """column id -> (added_version, name, state) of every visible column row."""
    return {
        c.column_id: (c.added_version, c.name, c.state)
        for c in all_columns(conn, snap.table, snap.segments)
    }


def _changed(
    before: dict[int, tuple[int, str, str]], after: dict[int, tuple[int, str, str]]
) -> dict[int, tuple[int, str, str] | None]:
    """The columns whose row differs between two snapshots: id -> the row after (None: gone)."""
    return {
        cid: after.get(cid) for cid in set(before) | set(after) if before.get(cid) != after.get(cid)
    }


def _copy_column(ctx: _Rollback, cid: int, added_version: int) -> None:
    ctx.conn.execute(
        text(
            "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, "
            "nullable, position, state, group_name, feature, branch, added_version, "
            "removed_version) SELECT table_id, column_id, name, physical_name, data_type, "
            "nullable, position, state, group_name, feature, :b, :v, NULL FROM columns "
            "WHERE table_id = :t AND column_id = :c AND added_version = :a"
        ),
        {"b": ctx.branch, "v": ctx.version, "t": ctx.t, "c": cid, "a": added_version},
    )
