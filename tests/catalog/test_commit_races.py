"""The racing-writer matrix: every commit path against a racing writer of each other kind.

Writer A runs until it is about to commit (its ``*.before_commit`` failpoint), writer B runs to
the end right then (an in-process hook), then A commits. ``EXPECTED`` states each ordered pair's
outcome as data: ``None`` when both commit (they touch disjoint cells), else a pattern of A's
``CommitConflict`` message. Afterwards the table must satisfy the invariants of DESIGN §4: ids
unique, every column file aligned with its fragment, no value silently NULL or wrong, ``status()``
truthful, and nothing visible of a failed commit. On SQLite and PostgreSQL (``wh``): one
warehouse per backend for the module (``shared_warehouse``: a catalog database costs more than a
test), and a table of its own for each test (``name``: tables share nothing but the catalog).

A second part kills a writer of each path inside the commit transaction (``commit.*``
failpoints in a child process): nothing is visible, and the table still takes the commit.

Upserts race on a keyed table (``key``, ``text``) set up like the plain one, against every
writer that a keyed table allows (no appends: a keyed table takes rows by upsert only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import APPEND_NAME, ROW_ID
from omnitable._failpoints import hooked

TEXTS = ["  Hello  World ", "Foo 42 bar", "ONE", "a b c d", "x1"]
NEW = ["new one", "new two"]
LEN_INT = omnitable.sql_feature("text_len", "length(text)", "int", "1")
LEN_BIGINT = omnitable.sql_feature("text_len", "length(text)", "bigint", "2")


pytestmark = pytest.mark.shared_warehouse  # one warehouse per backend (conftest)


@pytest.fixture
def name() -> str:
    """The test's own table in the shared warehouse."""
    return f"docs_{uuid.uuid4().hex[:8]}"


@dataclass
class Ctx:
    """One race: the warehouse, Spark (when a writer needs it) and what each writer did."""

    wh: omnitable.Warehouse
    name: str  # of the table
    spark: Any = None
    race: tuple[str, str] = ("", "")  # the kinds of writers A and B
    # column -> (ids it was given for, prefix of its values), by the last writer that ran
    notes: dict[str, tuple[list[int], str]] = field(default_factory=dict)
    dropped: bool = False

    def table(self) -> omnitable.Table:
        return self.wh.table(self.name)


@dataclass(frozen=True)
class Writer:
    """A commit path: ``prepare`` runs before the race (outside the hook), ``run`` does the work
    up to and including the commit (pausing at ``point`` when it is writer A), ``visible`` tells
    whether its commit shows in the table."""

    point: str
    run: Callable[[Ctx, omnitable.Table, str], object]
    visible: Callable[[Ctx, omnitable.Table, str], bool]
    spark: bool = False
    keyed: bool = False  # needs a keyed table (races only with writers a keyed table allows)


def _append(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.append(pa.table({"text": NEW}), f"new_{tag}")


def _spark_append(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    df = ctx.spark.createDataFrame([(s,) for s in NEW], "text string")
    return t.append(df, f"new_{tag}")


def _has_batch(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    return f"new_{tag}" in {b.name for b in t.batches()}


def _replace(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.append(pa.table({"text": [f"replaced by {tag}"]}), "b1", mode="replace")


def _replaced(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    return f"replaced by {tag}" in t.read(columns=["text"]).column("text").to_pylist()


def _add_columns(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return _add_note(ctx, t, f"note_{tag}", "n")


def _add_same_group(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return _add_note(ctx, t, f"note_{tag}", "n", group="g_shared")


def _add_same_column(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return _add_note(ctx, t, "note", tag)


def _add_note(
    ctx: Ctx, t: omnitable.Table, column: str, prefix: str, group: str | None = None
) -> object:
    """Give every current row ``column`` = prefix + its id, in ``group`` (default: a group of
    the column's name)."""
    ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()
    ctx.notes[column] = (ids, prefix)
    notes = pa.table({ROW_ID: pa.array(ids, pa.int64()), column: [f"{prefix}{i}" for i in ids]})
    return t.add_columns(notes, group=group or f"g_{column}")


def _has_same_column(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    return t.snapshot().has_column("note") and str(
        t.read(columns=["note"]).column("note")[0]
    ).startswith(tag)


def _append_same(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.append(pa.table({"text": [f"same by {tag}"]}), "same")


def _appended_same(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    return f"same by {tag}" in t.read(columns=["text"]).column("text").to_pylist()


def _has_column(name: str) -> Callable[[Ctx, omnitable.Table, str], bool]:
    return lambda ctx, t, tag: t.snapshot().has_column(name.format(tag=tag))


def _register(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.register(omnitable.sql_feature(f"up_{tag}", "upper(text)", "string", "1"))


def _retype(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.register(LEN_BIGINT)


def _retyped(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    snap = t.snapshot()
    return snap.has_column("text_len") and snap.column("text_len").data_type == "bigint"


def _backfill(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.backfill("text_len").run(ctx.spark)


def _backfilled(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    """A backfill commit is in the history (its cells may since have been replaced: a batch
    replaced, or the column re-registered with a new type)."""
    commits = [h for h in t.history() if h.op == "backfill"]
    return len(commits) >= (2 if tag == "a" and ctx.race == ("backfill", "backfill") else 1)


DELETED = {"a": TEXTS[0], "b": TEXTS[1], "k": TEXTS[2]}  # one row per writer, all in b1's fragment


def _delete(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.delete(pc.field("text") == DELETED[tag])


def _deleted(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    """The row is gone and a delete commit says so (a delete retried after its batch was
    replaced matches nothing and commits nothing)."""
    gone = DELETED[tag] not in t.read(columns=["text"]).column("text").to_pylist()
    return gone and any(
        h.op == "delete" and DELETED[tag] in h.summary["where"] for h in t.history()
    )


def _update(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    first = t.read(columns=[ROW_ID], batches=["b1"]).column(ROW_ID)[0].as_py()
    return t.update(pa.table({ROW_ID: [first], "text": [f"updated by {tag}"]}), why=tag)


def _updated(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    """The update committed (its row may since have been replaced with its batch)."""
    return any(h.op == "update" and h.summary.get("why") == tag for h in t.history())


def _rollback(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.rollback(1, why=tag)  # to the first append, before text_len was registered


def _rolled_back(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    return any(h.op == "rollback" and h.summary.get("why") == tag for h in t.history())


def _revert(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.revert(2, why=tag)  # undo the registration of text_len, keep everything after it


def _reverted(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    return any(h.op == "revert" and h.summary.get("why") == tag for h in t.history())


def _retire(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    return t.retire("text_len")


def _retired(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    """text_len is retired by a retire commit (A's own, when both writers retire)."""
    commits = sum(h.op == "retire" for h in t.history())
    return t.retired() == ["text_len"] and commits >= (
        2 if ctx.race == ("retire", "retire") and tag == "a" else 1
    )


KEYS = [f"k{i}" for i in range(len(TEXTS))]  # the keys of b1's rows in the keyed table


def _upsert(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    """Merge the text of b1's first row (key k0, as ``_update`` and ``DELETED["a"]``) and
    insert key new_<tag>."""
    data = pa.table({"key": ["k0", f"new_{tag}"], "text": [f"upserted by {tag}", f"new {tag}"]})
    return t.upsert(data, why=tag)


def _upserted(ctx: Ctx, t: omnitable.Table, tag: str) -> bool:
    """Its new key is a row, found by lookup (check_invariants reads it too), and k0 holds the
    text it merged (unless the other writer, an upsert too, merged k0 after it)."""
    merged_after = ctx.race == ("upsert", "upsert") and tag == "b"
    text = t.lookup(["k0"], ["text"]).column("text").to_pylist()
    return t.lookup([f"new_{tag}"]).num_rows == 1 and (
        merged_after or text == [f"upserted by {tag}"]
    )


def _drop_recreate(ctx: Ctx, t: omnitable.Table, tag: str) -> object:
    ctx.wh.drop_table(ctx.name)
    ctx.dropped = True
    fresh = ctx.wh.create_table(ctx.name, {"text": "string"})
    return fresh.append(pa.table({"text": ["reborn"]}), "b1")


WRITERS: dict[str, Writer] = {
    "append": Writer("append.before_commit", _append, _has_batch),
    "spark_append": Writer("append.before_commit", _spark_append, _has_batch, spark=True),
    "replace": Writer("append.before_commit", _replace, _replaced),
    "append_same": Writer("append.before_commit", _append_same, _appended_same),
    "add_same_column": Writer("add_columns.before_commit", _add_same_column, _has_same_column),
    "add_same_group": Writer(
        "add_columns.before_commit", _add_same_group, _has_column("note_{tag}")
    ),
    "add_columns": Writer("add_columns.before_commit", _add_columns, _has_column("note_{tag}")),
    "register": Writer("register.before_commit", _register, _has_column("up_{tag}")),
    "retype": Writer("register.before_commit", _retype, _retyped),
    "backfill": Writer("backfill.before_commit", _backfill, _backfilled, spark=True),
    "delete": Writer("delete.before_commit", _delete, _deleted),
    "retire": Writer("columns.before_commit", _retire, _retired),
    "update": Writer("update.before_commit", _update, _updated),
    "rollback": Writer("rollback.before_commit", _rollback, _rolled_back),
    "revert": Writer("revert.before_commit", _revert, _reverted),
    "drop_recreate": Writer("", _drop_recreate, lambda ctx, t, tag: ctx.dropped),
    "upsert": Writer("upsert.before_commit", _upsert, _upserted, keyed=True),
}

Outcome = tuple[type[Exception], str] | str | None
NOOP = "noop"  # A returns without committing: what it would change is gone


def conflict(pattern: str) -> Outcome:
    return (omnitable.CommitConflict, pattern)


# A's outcome per (A, B): None = both commit; else the error A gets and a pattern of its message.
_REMOVED = conflict(r"\d+ fragment\(s\) were removed by a concurrent commit")
_REPLACED = conflict(r"the batch it replaces was changed by a concurrent commit")
_CHANGED = conflict(r"column 'text_len' was renamed, retired or restored by a concurrent commit")
# TABLE: the table's name (each test has its own)
_DISCARDS = conflict(
    r"Cannot roll back table 'TABLE' to version 1: version \d+ was committed after"
)
_REVERT_CHANGED = conflict(
    r"Cannot revert version 2 .*column id \d+ was renamed, retired or replaced"
)
_REGISTERED = conflict(r"feature\(s\) \S+@\d+ were registered by a concurrent commit")
_DROPPED = (
    omnitable.NotFoundError,
    r"Cannot commit \w+: the table \(id \w+\) was dropped by another process",
)
EXPECTED: dict[tuple[str, str], Outcome] = {
    ("append", "append"): None,
    ("append", "spark_append"): None,
    ("append", "replace"): None,
    ("append", "add_columns"): None,
    ("append", "register"): None,
    ("append", "retype"): None,
    ("append", "backfill"): None,
    ("append", "drop_recreate"): _DROPPED,
    ("append_same", "append_same"): conflict(
        r"Cannot append batch 'same': a concurrent commit created it first"
    ),
    ("add_same_column", "add_same_column"): conflict(
        r"column 'note' was added by a concurrent commit"
    ),
    ("add_same_group", "add_same_group"): conflict(
        r"column group 'g_shared' was created by a concurrent commit"
    ),
    ("spark_append", "append"): None,
    ("spark_append", "replace"): None,
    ("spark_append", "add_columns"): None,
    ("spark_append", "drop_recreate"): _DROPPED,
    ("replace", "append"): None,
    ("replace", "replace"): _REPLACED,
    ("replace", "add_columns"): None,
    ("replace", "register"): None,
    ("replace", "retype"): None,
    ("replace", "backfill"): None,
    ("replace", "drop_recreate"): _DROPPED,
    ("add_columns", "append"): None,
    ("add_columns", "spark_append"): None,
    ("add_columns", "replace"): _REMOVED,
    ("add_columns", "add_columns"): None,
    ("add_columns", "register"): None,
    ("add_columns", "retype"): None,
    ("add_columns", "backfill"): None,
    ("add_columns", "drop_recreate"): _DROPPED,
    ("register", "append"): None,
    ("register", "replace"): None,
    ("register", "add_columns"): None,
    ("register", "register"): _REGISTERED,
    ("register", "retype"): _REGISTERED,
    ("register", "backfill"): None,
    ("register", "drop_recreate"): _DROPPED,
    ("retype", "append"): None,
    ("retype", "replace"): None,
    ("retype", "add_columns"): None,
    ("retype", "register"): _REGISTERED,
    ("retype", "backfill"): None,
    ("retype", "drop_recreate"): _DROPPED,
    ("backfill", "append"): None,
    ("backfill", "spark_append"): None,
    ("backfill", "replace"): _REMOVED,
    ("backfill", "add_columns"): None,
    ("backfill", "register"): None,
    ("backfill", "retype"): conflict(r"column 'text_len' was replaced"),
    ("backfill", "backfill"): conflict(r"wrote column\(s\) text_len in 1 of the same fragment"),
    ("backfill", "drop_recreate"): _DROPPED,
    # a delete conflicting with a delete of the same fragment re-reads the head and retries
    ("delete", "delete"): None,
    ("delete", "append"): None,
    ("delete", "spark_append"): None,
    ("delete", "replace"): NOOP,  # its rows were replaced: the retry matches nothing
    ("delete", "add_columns"): None,
    ("delete", "register"): None,
    ("delete", "retype"): None,
    ("delete", "backfill"): None,
    ("delete", "drop_recreate"): _DROPPED,
    ("append", "delete"): None,
    ("spark_append", "delete"): None,
    ("replace", "delete"): None,
    ("add_columns", "delete"): None,
    ("register", "delete"): None,
    ("retype", "delete"): None,
    ("backfill", "delete"): None,
    # retiring the feature output text_len (the path of every rename, retire and restore)
    ("retire", "append"): None,
    ("retire", "spark_append"): None,
    ("retire", "replace"): None,
    ("retire", "add_columns"): None,
    ("retire", "register"): None,
    ("retire", "retype"): _CHANGED,
    ("retire", "backfill"): None,
    ("retire", "delete"): None,
    ("retire", "retire"): _CHANGED,
    ("retire", "drop_recreate"): _DROPPED,
    ("append", "retire"): None,
    ("spark_append", "retire"): None,
    ("replace", "retire"): None,
    ("add_columns", "retire"): None,
    ("register", "retire"): None,
    ("retype", "retire"): conflict(r"column 'text_len' was removed by a concurrent commit"),
    ("backfill", "retire"): conflict(r"column 'text_len' no longer exists \(retired"),
    ("delete", "retire"): None,
    # updating the raw column text (the input of text_len) of b1's first row
    ("update", "append"): None,
    ("update", "spark_append"): None,
    ("update", "replace"): _REMOVED,
    ("update", "add_columns"): None,
    ("update", "register"): None,
    ("update", "retype"): None,
    ("update", "backfill"): None,
    ("update", "delete"): None,
    ("update", "retire"): None,
    ("update", "update"): conflict(r"wrote column\(s\) text in 1 of the same fragment"),
    ("update", "drop_recreate"): _DROPPED,
    ("append", "update"): None,
    ("spark_append", "update"): None,
    ("replace", "update"): None,
    ("add_columns", "update"): None,
    ("register", "update"): None,
    ("retype", "update"): None,
    ("backfill", "update"): conflict(r"its input column\(s\) text were recomputed"),
    ("delete", "update"): NOOP,  # the filter's column changed: the retry matches nothing
    ("retire", "update"): None,
    # a rollback never discards a commit its caller did not see
    **{
        ("rollback", b): _DISCARDS
        for b in (
            "append",
            "spark_append",
            "replace",
            "add_columns",
            "register",
            "retype",
            "backfill",
            "delete",
            "update",
            "retire",
            "rollback",
        )
    },
    ("rollback", "drop_recreate"): _DROPPED,
    # reverting the registration of text_len (version 2): checked at its commit, against the head
    ("revert", "append"): None,
    ("revert", "spark_append"): None,
    ("revert", "replace"): None,
    ("revert", "add_columns"): None,
    ("revert", "register"): None,
    ("revert", "retype"): _REVERT_CHANGED,
    ("revert", "backfill"): None,
    ("revert", "delete"): None,
    ("revert", "update"): None,
    ("revert", "retire"): _REVERT_CHANGED,
    ("revert", "rollback"): _REVERT_CHANGED,
    ("revert", "revert"): (
        omnitable.ValidationError,
        r"Cannot revert version 2 .*reverted already",
    ),
    ("revert", "drop_recreate"): _DROPPED,
    ("append", "revert"): None,
    ("spark_append", "revert"): None,
    ("replace", "revert"): None,
    ("add_columns", "revert"): None,
    ("register", "revert"): None,
    ("retype", "revert"): conflict(r"column 'text_len' was removed by a concurrent commit"),
    ("backfill", "revert"): conflict(r"column 'text_len' no longer exists"),
    ("delete", "revert"): None,
    ("update", "revert"): None,
    ("retire", "revert"): _CHANGED,
    ("rollback", "revert"): _DISCARDS,
    # upserts into the keyed table: an upsert that conflicts (a cell it merges written, a key
    # it inserts taken) re-plans on the new head, so as writer A it commits after each of these
    ("upsert", "add_columns"): None,
    ("upsert", "register"): None,
    ("upsert", "retype"): None,
    ("upsert", "backfill"): None,
    ("upsert", "delete"): None,
    ("upsert", "retire"): None,
    ("upsert", "update"): None,  # the same cell: re-planned, A's value wins
    ("upsert", "rollback"): None,
    ("upsert", "revert"): None,
    ("upsert", "upsert"): None,  # the same cell: re-planned, A's value wins
    ("upsert", "drop_recreate"): _DROPPED,
}
# as writer B, an upsert writes what an update writes (the text of b1's first row), and a new
# row (which no writer A here depends on): A fares as against the update
EXPECTED |= {
    (a, "upsert"): EXPECTED[(a, "update")]
    for a in ("add_columns", "register", "retype", "backfill", "delete", "retire", "update",
              "rollback", "revert")
}  # fmt: skip


def _setup(ctx: Ctx, keyed: bool = False) -> omnitable.Table:
    """Version 1: batch b1 of TEXTS; version 2: feature text_len registered."""
    if keyed:
        t = ctx.wh.create_table(ctx.name, {"key": "string", "text": "string"}, key="key")
        t.upsert(pa.table({"key": KEYS, "text": TEXTS}), append_name="b1")
    else:
        t = ctx.wh.create_table(ctx.name, {"text": "string"})
        t.append(pa.table({"text": TEXTS}), "b1")
    t.register(LEN_INT)
    return t


PAIRS = [
    pytest.param(
        a,
        b,
        id=f"{a}-vs-{b}",
        marks=[pytest.mark.spark] if WRITERS[a].spark or WRITERS[b].spark else [],
    )
    for a, b in EXPECTED
]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_racing_writers(
    a: str, b: str, wh: omnitable.Warehouse, name: str, request: pytest.FixtureRequest
) -> None:
    wa, wb = WRITERS[a], WRITERS[b]
    spark = request.getfixturevalue("spark") if wa.spark or wb.spark else None
    ctx = Ctx(wh, name, spark, (a, b))
    _setup(ctx, wa.keyed or wb.keyed)
    ta, tb = ctx.table(), ctx.table()
    before: dict[str, int] = {}

    def writer_b() -> None:
        before["version"] = tb.version
        wb.run(ctx, tb, "b")
        if not ctx.dropped:
            before["after_b"] = tb.version

    expected = EXPECTED[(a, b)]
    with hooked(wa.point, writer_b):
        if expected is None or expected == NOOP:
            wa.run(ctx, ta, "a")
        else:
            assert not isinstance(expected, str)
            with pytest.raises(expected[0], match=expected[1].replace("TABLE", name)):
                wa.run(ctx, ta, "a")
    assert "version" in before, f"writer {a} never reached {wa.point}"
    t = ctx.table()
    assert wb.visible(ctx, t, "b")
    if not ctx.dropped:
        assert wa.visible(ctx, t, "a") is (expected is None)
        assert t.version == before["after_b"] + (1 if expected is None else 0)
        if b == "delete":  # B's row stays deleted, whatever A wrote
            assert DELETED["b"] not in t.read(columns=["text"]).column("text").to_pylist()
    else:
        assert [x.name for x in t.batches()] == ["b1"] and t.version == 1
    check_invariants(ctx, t)


def check_invariants(ctx: Ctx, t: omnitable.Table) -> None:
    """Ids unique, files aligned, raw values intact, ``status()`` truthful."""
    snap = t.snapshot()
    frags = {f.fragment_id: f for f in snap.fragments}
    for fid, files in snap.files_by_fragment.items():
        assert fid in frags, f"file of an invisible fragment {fid}"
        for f in files:
            assert f.row_count == frags[fid].row_count, f"misaligned file {f.path}"
    names = [c.name for c in snap.user_columns]
    got = t.read(columns=[ROW_ID, APPEND_NAME, *names])
    ids = got.column(ROW_ID).to_pylist()
    assert len(set(ids)) == len(ids), "duplicate row ids"
    assert got.column("text").null_count == 0, "the raw column reads NULL"
    if t.key:  # keys unique among live rows, and the index finds each one's row
        keys = got.column(t.key[0]).to_pylist()
        assert len(set(keys)) == len(keys), "duplicate keys"
        assert t.lookup(keys, [ROW_ID]).column(ROW_ID).to_pylist() == ids, "index disagrees"
    for col, (given, prefix) in ctx.notes.items():
        if col not in names:
            continue
        values = dict(zip(ids, got.column(col).to_pylist(), strict=True))
        for i, v in values.items():
            assert v == (f"{prefix}{i}" if i in given else None), (col, i, v)
    if "text_len" in names:
        status = t.status()
        lengths = pc.utf8_length(got.column("text")).to_pylist()
        for b in {b.name for b in snap.batches}:
            if status.state(b, "text_len") != "done":
                continue
            rows = [i for i, n in enumerate(got.column(APPEND_NAME).to_pylist()) if n == b]
            assert [got.column("text_len")[i].as_py() for i in rows] == [
                lengths[i] for i in rows
            ], f"status says text_len is done for {b} but its values are not"


# -- killed mid-commit ------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import importlib.util, sys
    import omnitable
    spec = importlib.util.spec_from_file_location("races", sys.argv[1])
    races = sys.modules["races"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(races)
    races.run_in_child(*sys.argv[2:])
""")


# The child's Spark lives for one small write: its JVM compiles with C1 only (C2 would spend the
# start-up's CPU on code that never gets hot: the child's wall time about halves here) and its
# settings suit tiny data. Neither changes what runs or what it writes.
CHILD_SPARK = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
}


def run_in_child(uri: str, root: str, name: str, kind: str) -> None:
    """Child process body: run writer ``kind`` against the warehouse (its commit is killed)."""
    wh = omnitable.connect(uri, root=root or None)
    spark = None
    if WRITERS[kind].spark:
        spark = omnitable.spark_session(wh, master="local[1]", **CHILD_SPARK)
    ctx = Ctx(wh, name, spark, (kind, ""))
    WRITERS[kind].run(ctx, ctx.table(), "k")
    print("committed", flush=True)


@pytest.mark.parametrize(
    "kind",
    [
        "replace",
        "add_columns",
        "register",
        "retype",
        "delete",
        "retire",
        "update",
        "rollback",
        "revert",
        "upsert",
        # each starts Spark in the child (tens of seconds)
        pytest.param("spark_append", marks=[pytest.mark.spark, pytest.mark.slow]),
        pytest.param("backfill", marks=[pytest.mark.spark, pytest.mark.slow]),
    ],
)
def test_writer_killed_mid_commit(
    kind: str,
    wh: omnitable.Warehouse,
    catalog_spec: tuple[str, str | None],
    name: str,
    request: pytest.FixtureRequest,
) -> None:
    """``os._exit`` after the commit inserted its rows (columns, features, files, lineage) but
    before the transaction ended: nothing is visible, and the same operation then commits. (The
    local append is covered, at every commit point, by tests/table/test_crash.py.)"""
    uri, root = catalog_spec
    ctx = Ctx(wh, name, request.getfixturevalue("spark") if WRITERS[kind].spark else None)
    t = _setup(ctx, WRITERS[kind].keyed)
    version, history = t.version, [h.op for h in t.history()]
    env = dict(
        os.environ,
        OMNITABLE_FAILPOINTS="commit.mid_insert=exit",
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, __file__, uri, root or "", name, kind],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 77, proc.stderr[-3000:]
    assert "committed" not in proc.stdout
    assert t.version == version and [h.op for h in t.history()] == history
    assert not WRITERS[kind].visible(ctx, t, "k")
    check_invariants(ctx, t)
    WRITERS[kind].run(ctx, t, "k")  # the table still takes the same commit
    assert t.version == version + 1 and WRITERS[kind].visible(ctx, t, "k")
    check_invariants(ctx, t)


# -- upserts of the same keys ---------------------------------------------------------------


def _keyed(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(name, {"key": "string", "text": "string", "tags": "array<string>"},
                        key="key")  # fmt: skip
    t.upsert(pa.table({"key": ["k0", "k1"], "text": ["t0", "t1"], "tags": [["s0"], ["s1"]]}))
    return t


def _row(t: omnitable.Table, key: str) -> list[dict[str, Any]]:
    """Every live row holding ``key`` (by reading), after checking lookup agrees."""
    read = t.read(["key", "text", "tags"], where=pc.field("key") == key).to_pylist()
    assert t.lookup([key], ["key", "text", "tags"]).to_pylist() == read
    return read


@pytest.mark.parametrize(
    ("policy", "text", "tags"),
    [
        ("last_write_wins", "by a", ["a"]),
        ("first_write_wins", "by b", ["b"]),
        ("append_list", "by a", ["b", "a"]),
    ],
)
def test_upserts_inserting_the_same_key_apply_in_commit_order(
    wh: omnitable.Warehouse, name: str, policy: str, text: str, tags: list[str]
) -> None:
    """A and B both find key 'same' new; B commits first, so A's insert conflicts, A re-plans
    and merges into B's row under its policy: one row, the policy applied in commit order."""
    t, other = _keyed(wh, name), wh.table(name)
    inserted = {}

    def writer_b() -> None:
        got = other.upsert(pa.table({"key": ["same"], "text": ["by b"], "tags": [["b"]]}))
        inserted["b"] = got.inserted

    with hooked("upsert.before_commit", writer_b):
        result = t.upsert(pa.table({"key": ["same"], "text": ["by a"], "tags": [["a"]]}),
                          policy=policy)  # fmt: skip
    assert inserted == {"b": 1} and result.inserted == 0
    assert (result.merged, result.unchanged) == ((0, 1) if policy == "first_write_wins" else (1, 0))
    assert _row(t, "same") == [{"key": "same", "text": text, "tags": tags}]
    check_invariants(Ctx(wh, name), t)


def test_upserts_of_disjoint_new_keys_both_commit(
    wh: omnitable.Warehouse, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """B's new rows change the table's rows after A probed its keys: A re-checks its keys
    against them at commit and commits, without re-planning."""
    t, other = _keyed(wh, name), wh.table(name)
    b: list[Any] = []

    def writer_b() -> None:
        b.append(other.upsert(pa.table({"key": ["x2"], "text": ["two"]})))

    with (
        hooked("upsert.before_commit", writer_b),
        caplog.at_level("INFO", logger="omnitable.dataops.upsert"),
    ):
        result = t.upsert(pa.table({"key": ["x1"], "text": ["one"]}))
    assert (b[0].version, b[0].inserted) == (2, 1)
    assert (result.version, result.inserted, result.merged) == (3, 1, 0)
    assert not [r for r in caplog.records if "re-planning" in r.getMessage()]
    assert sorted(t.read(["key"]).column("key").to_pylist()) == ["k0", "k1", "x1", "x2"]
    assert _row(t, "x1")[0]["text"] == "one" and len(_row(t, "x2")) == 1
    check_invariants(Ctx(wh, name), t)


@pytest.mark.parametrize("first", ["upsert", "update"])
def test_upsert_and_update_of_the_same_cell_end_in_a_serial_order(
    wh: omnitable.Warehouse, name: str, first: str
) -> None:
    """Writer ``first`` pauses before its commit while the other writes the same cell (text of
    k0): the update conflicts, the upsert re-plans; either way the end state is a serial one."""
    t, other = _keyed(wh, name), wh.table(name)
    row_id = t.lookup(["k0"], [ROW_ID]).column(ROW_ID)[0].as_py()

    def upsert(table: omnitable.Table) -> object:
        return table.upsert(pa.table({"key": ["k0"], "text": ["upserted"]}))

    def update(table: omnitable.Table) -> object:
        return table.update(pa.table({ROW_ID: [row_id], "text": ["updated"]}))

    a, b = (upsert, update) if first == "upsert" else (update, upsert)
    point = f"{first}.before_commit"
    with hooked(point, lambda: b(other)):
        if first == "update":
            with pytest.raises(omnitable.CommitConflict, match=r"wrote column\(s\) text"):
                a(t)
        else:
            a(t)
    final = _row(t, "k0")[0]["text"]
    serial = {("update", "upsert"): "upserted", ("upsert", "update"): "updated"}
    assert final in serial.values()
    assert final == serial[("update", "upsert")]  # the upsert re-planned, or the update failed
    ops = [h.op for h in t.history(2)]
    assert ops == (["upsert", "update"] if first == "upsert" else ["upsert", "upsert"])
    check_invariants(Ctx(wh, name), t)


@pytest.mark.parametrize(
    ("policy", "keys"),
    [
        ("last_write_wins", ["k0", "k9"]),
        ("first_write_wins", ["k0", "k9"]),
        ("append_list", ["k0", "k9"]),
        ("last_write_wins", ["k0"]),  # a merge only
    ],
)
def test_an_upsert_after_a_delete_of_its_key_inserts_it_again(
    wh: omnitable.Warehouse, name: str, policy: str, keys: list[str]
) -> None:
    """The row an upsert merges into is deleted before the upsert commits: the upsert re-plans
    and inserts the key, as if it ran after the delete (its data is never merged into a deleted
    row and lost)."""
    t, other = _keyed(wh, name), wh.table(name)
    data = pa.table({"key": keys, "text": [f"{k} again" for k in keys],
                     "tags": [[k] for k in keys]})  # fmt: skip
    with hooked("upsert.before_commit", lambda: other.delete(pc.field("key") == "k0")):
        result = t.upsert(data, policy=policy)
    assert (result.inserted, result.merged, result.unchanged) == (len(keys), 0, 0)
    assert _row(t, "k0") == [{"key": "k0", "text": "k0 again", "tags": ["k0"]}]
    assert [h.op for h in t.history(2)] == ["upsert", "delete"]
    check_invariants(Ctx(wh, name), t)
