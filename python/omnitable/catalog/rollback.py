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
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.records import FileRecord, TableRecord
from omnitable.catalog.sets import ColumnSet, insert_missing_sets
from omnitable.catalog.snapshot import Snapshot, all_columns, load_snapshot
from omnitable.catalog.sql import in_list


def apply_rollback(
    conn: Connection, table: TableRecord, branch: str, target: int, version: int
) -> dict[str, int]:
    """Make the state of ``target`` the state of the new ``version`` on ``branch``; returns
    counts of what changed (for the commit summary)."""
    t = table.table_id
    old = load_snapshot(conn, table, version=target)
    head = load_snapshot(conn, table, branch=branch)
    ctx = _Rollback(conn, t, branch, version)
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
    ctx.features(target)
    return {"batches": len(batch_ids), "fragments": len(frag_ids), "files": files,
            "vectors": vectors}  # fmt: skip


def _gone(have: list[Any], other: list[Any], key: str) -> list[str]:
    """Ids in ``have`` that ``other`` lacks."""
    theirs = {getattr(x, key) for x in other}
    return [getattr(x, key) for x in have if getattr(x, key) not in theirs]


class _Rollback:
    """The statements of one rollback (inside its commit transaction)."""

    def __init__(self, conn: Connection, t: str, branch: str, version: int) -> None:
        self.conn, self.t, self.branch, self.version = conn, t, branch, version

    def remove(self, table: str, id_col: str, ids: list[str]) -> None:
        if ids:
            self.conn.execute(
                text(
                    f"UPDATE {table} SET removed_version = :v WHERE table_id = :t AND "
                    f"{id_col} = :id AND removed_version IS NULL"
                ),
                [{"v": self.version, "t": self.t, "id": i} for i in ids],
            )

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
                self.conn.execute(
                    text(
                        "UPDATE columns SET removed_version = :v WHERE table_id = :t AND "
                        "column_id = :c AND removed_version IS NULL"
                    ),
                    {"v": self.version, "t": self.t, "c": cid},
                )
        back = [
            c
            for cid, c in then.items()
            if cid not in now or now[cid].added_version != c.added_version
        ]
        for col in back:
            self.conn.execute(
                text(
                    "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, "
                    "nullable, position, state, group_name, feature, branch, added_version, "
                    "removed_version) SELECT table_id, column_id, name, physical_name, data_type, "
                    "nullable, position, state, group_name, feature, :b, :v, NULL FROM columns "
                    "WHERE table_id = :t AND column_id = :c AND added_version = :a"
                ),
                {"b": self.branch, "v": self.version, "t": self.t, "c": col.column_id,
                 "a": col.added_version},
            )  # fmt: skip

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
        mapping = {fid: uuid.uuid4().hex for fid in copies}
        sets, rows = [], []
        for row in self.rows("files", "file_id", sorted(copies)):
            f = then[row["file_id"]]
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

    def features(self, target: int) -> None:
        """The version of each feature that was current at ``target`` is current again."""
        rows = self.conn.execute(
            text("SELECT name, version, registered_version FROM features WHERE table_id = :t"),
            {"t": self.t},
        ).all()
        current: dict[str, tuple[int, str]] = {}
        then: dict[str, tuple[int, str]] = {}
        for name, version, registered in rows:
            current[name] = max(current.get(name, (-1, "")), (int(registered), version))
            if int(registered) <= target:
                then[name] = max(then.get(name, (-1, "")), (int(registered), version))
        for name, (_, version) in then.items():
            if current[name][1] != version:
                self.conn.execute(
                    text(
                        "UPDATE features SET registered_version = :v WHERE table_id = :t AND "
                        "name = :n AND version = :fv"
                    ),
                    {"v": self.version, "t": self.t, "n": name, "fv": version},
                )


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
