"""``Table.upsert`` on SQLite and PostgreSQL (``wh``): the merge policies, custom policies,
keys of several columns and types, deletes, time travel, rollback and revert, feature lineage,
bad input that commits nothing, and rejected rows in the error table. One warehouse per backend
for the module (``shared_warehouse``): each test creates tables of its own names (``_names``)."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

import omnitable
from omnitable import APPEND_NAME, ROW_ID
from omnitable.format.access import ACCESS_DIR

from . import omt_upsert_policies as policies

_names = itertools.count()


pytestmark = pytest.mark.shared_warehouse  # one warehouse per backend (conftest)


SCHEMA = {"url": "string", "label": "bigint", "note": "string", "tags": "array<string>"}


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    """Keyed by url: a (label 1, tags [x]), b (2, []), c (3, NULL), notes n<url>."""
    t = wh.create_table(f"k{next(_names)}", SCHEMA, key="url")
    t.upsert(pa.table({"url": ["a", "b", "c"], "label": [1, 2, 3], "note": ["na", "nb", "nc"],
                       "tags": pa.array([["x"], [], None], pa.list_(pa.string()))}),
             append_name="b1")  # fmt: skip
    return t


def _rows(t: omnitable.Table, **kw: Any) -> dict[str, tuple[Any, ...]]:
    """url -> (label, note, tags) of the live rows."""
    got = t.read(["url", "label", "note", "tags"], **kw).to_pylist()
    return {r["url"]: (r["label"], r["note"], r["tags"]) for r in got}


def _files(t: omnitable.Table) -> set[str]:
    """The table's files, but the access log's (a read's entry is written by a background
    thread, and may land after the listing: it is not the table's state)."""
    selector = pafs.FileSelector(t.location.path, recursive=True)
    return {i.path for i in t.location.fs.get_file_info(selector)
            if i.type == pafs.FileType.File and f"/{ACCESS_DIR}/" not in i.path}  # fmt: skip


def test_last_write_wins_writes_given_columns_and_nulls(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    v = t.version
    data = pa.table({"url": ["d", "b"], "label": pa.array([4, None], pa.int64())})
    result = t.upsert(data, why="late labels")
    assert (result.version, result.inserted, result.merged, result.unchanged) == (v + 1, 1, 1, 0)
    assert result.rejected.num_rows == 0 and result.files == 1
    assert _rows(t) == {
        "a": (1, "na", ["x"]),
        "b": (None, "nb", []),  # the NULL given is written; note and tags are kept
        "c": (3, "nc", None),
        "d": (4, None, None),
    }
    head = t.history(1)[0]
    assert head.op == "upsert" and head.summary["why"] == "late labels"
    assert (head.summary["inserted"], head.summary["merged"]) == (1, 1)
    assert len(t.batches()) == 2
    ids = t.read([ROW_ID, "url"]).to_pydict()
    assert len(set(ids[ROW_ID])) == 4


def test_append_list_concatenates_lists_and_replaces_scalars(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    tags = pa.array([["y"], None, ["z"], ["w"]], pa.list_(pa.string()))
    data = pa.table({"url": ["a", "b", "c", "e"], "label": [10, 20, 30, 50], "tags": tags})
    result = t.upsert(data, policy="append_list")
    assert (result.inserted, result.merged) == (1, 3)
    assert _rows(t) == {
        "a": (10, "na", ["x", "y"]),
        "b": (20, "nb", []),  # NULL incoming is empty
        "c": (30, "nc", ["z"]),  # NULL stored is empty
        "e": (50, None, ["w"]),
    }


def test_first_write_wins_keeps_stored_and_commits_nothing_without_news(
    wh: omnitable.Warehouse,
) -> None:
    t = _table(wh)
    v, files = t.version, _files(t)
    result = t.upsert(pa.table({"url": ["a", "b"], "label": [10, 20]}), policy="first_write_wins")
    assert (result.version, result.inserted, result.merged, result.unchanged) == (None, 0, 0, 2)
    assert t.version == v and _files(t) == files and t.history(1)[0].version == v
    result = t.upsert(pa.table({"url": ["a", "f"], "label": [10, 60]}), policy="first_write_wins")
    assert (result.version, result.inserted, result.unchanged) == (v + 1, 1, 1)
    assert _rows(t)["a"] == (1, "na", ["x"]) and _rows(t)["f"] == (60, None, None)


def test_only_existing_keys_commit_no_new_batch(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    batches = [b.name for b in t.batches()]
    result = t.upsert(pa.table({"url": ["c", "a"], "note": ["NC", "NA"]}))
    assert (result.version, result.inserted, result.merged) == (t.version, 0, 2)
    assert [b.name for b in t.batches()] == batches
    assert t.count() == 3 and _rows(t)["a"] == (1, "NA", ["x"])


@pytest.mark.parametrize("policy", [policies.add_labels, f"{policies.__name__}:add_labels"])
def test_custom_policy_as_callable_and_reference(wh: omnitable.Warehouse, policy: Any) -> None:
    t = _table(wh)
    result = t.upsert(pa.table({"url": ["a", "c", "g"], "label": [100, 300, 7]}), policy=policy)
    assert (result.inserted, result.merged, result.rejected.num_rows) == (1, 2, 0)
    got = _rows(t)
    assert [got[k][0] for k in "abcg"] == [101, 2, 303, 7]
    assert got["a"][1:] == ("na", ["x"])  # columns not given are kept


@pytest.mark.spark
@pytest.mark.parametrize(
    ("policy", "error"),
    [
        ("add_labels_but_not_13", "policy: ValueError"),
        ("add_labels_but_exit_on_13", "policy: exit(3)"),
    ],
)
def test_a_custom_policy_failing_rejects_only_its_rows(
    spark, wh: omnitable.Warehouse, policy: str, error: str
) -> None:  # type: ignore[no-untyped-def]
    """Raising, or ending the process it runs in: the policy runs isolated in a child process,
    so the caller lives on and only the rows it failed on are rejected."""
    t = _table(wh)
    data = pa.table({"url": ["a", "b", "h"], "label": [10, 13, 8]})
    result = t.upsert(data, policy=f"{policies.__name__}:{policy}", spark=spark)
    assert (result.inserted, result.merged) == (1, 1)
    assert result.rejected.column("url").to_pylist() == ["b"]
    assert result.rejected.column("_ai_error_")[0].as_py().startswith(error)
    assert [_rows(t)[k][0] for k in "abch"] == [11, 2, 3, 8]  # b keeps its stored label
    errors = t.errors(spark=spark).where("kind = 'upsert'").collect()
    assert [(e.exception_type, e.input_digest, e.file_id) for e in errors] == [
        ("policy", "'b'", None)
    ]


@pytest.mark.spark
def test_null_and_duplicate_keys_are_rejected_to_the_error_table(
    spark, wh: omnitable.Warehouse
) -> None:  # type: ignore[no-untyped-def]
    t = _table(wh)
    data = pa.table({"url": ["a", None, "n", "m", "n"], "label": [10, 11, 12, 13, 14]})
    result = t.upsert(data, spark=spark)
    assert (result.inserted, result.merged) == (1, 1)  # m inserted, a merged
    rejected = result.rejected.to_pydict()
    assert rejected["url"] == [None, "n", "n"] and rejected["label"] == [11, 12, 14]
    assert [e.split(":")[0] for e in rejected["_ai_error_"]] == ["null_key", "duplicate_key",
                                                               "duplicate_key"]  # fmt: skip
    assert "'n' occurs 2 times" in rejected["_ai_error_"][1]
    assert sorted(_rows(t)) == ["a", "b", "c", "m"] and _rows(t)["a"][0] == 10
    errors = t.errors(spark=spark).where("kind = 'upsert'").orderBy("row_offset").collect()
    assert [(e.row_offset, e.exception_type, e.file_id) for e in errors] == [
        (1, "null_key", None), (2, "duplicate_key", None), (4, "duplicate_key", None)
    ]  # fmt: skip


def test_an_upsert_of_no_rows_commits_nothing(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    v = t.version
    empty = pa.table({"url": pa.array([], pa.string()), "label": pa.array([], pa.int64())})
    for data in (empty, empty.to_pandas()):
        result = t.upsert(data)
        assert (result.version, result.inserted, result.merged, result.rejected.num_rows) == (
            None, 0, 0, 0
        )  # fmt: skip
    with pytest.raises(omnitable.ValidationError, match=r"no key column\(s\) \['url'\]"):
        t.upsert(pa.table({"label": pa.array([], pa.int64())}))
    assert t.version == v


@pytest.mark.spark
def test_a_policy_failing_on_every_row_writes_nothing(spark, wh: omnitable.Warehouse) -> None:  # type: ignore[no-untyped-def]
    t = _table(wh)
    v, before = t.version, _rows(t)
    data = pa.table({"url": ["a", "b"], "label": [13, 13]})
    result = t.upsert(data, policy=policies.add_labels_but_not_13, spark=spark)
    assert (result.version, result.merged, result.files, result.rejected.num_rows) == (
        None, 0, 0, 2
    )  # fmt: skip
    assert t.version == v and _rows(t) == before
    data = pa.table({"url": ["a", "new"], "label": [13, 5]})
    result = t.upsert(data, policy=policies.add_labels_but_not_13, spark=spark)
    assert (result.version, result.inserted, result.merged, result.files) == (v + 1, 1, 0, 0)
    assert _rows(t)["a"] == before["a"] and _rows(t)["new"][0] == 5


def test_multi_column_date_and_integer_keys(wh: omnitable.Warehouse) -> None:
    d1, d2 = dt.date(2026, 1, 1), dt.date(2026, 1, 2)
    t = wh.create_table(f"m{next(_names)}", {"site": "string", "day": "date", "n": "int",
                                              "v": "double"}, key=["site", "day"])  # fmt: skip
    t.upsert(pa.table({"site": ["s", "s", "t"], "day": [d1, d2, d1], "n": [1, 2, 3],
                       "v": [0.1, 0.2, 0.3]}))  # fmt: skip
    result = t.upsert(pa.table({"site": ["s", "t"], "day": [d2, d2], "v": [2.5, 9.0]}))
    assert (result.inserted, result.merged) == (1, 1)
    got = sorted(tuple(r.values()) for r in t.read(["site", "day", "n", "v"]).to_pylist())
    assert got == [("s", d1, 1, 0.1), ("s", d2, 2, 2.5), ("t", d1, 3, 0.3), ("t", d2, None, 9.0)]
    assert t.lookup([("t", d2), ("s", d1)], ["n", "v"]).to_pylist() == [
        {"n": None, "v": 9.0}, {"n": 1, "v": 0.1}
    ]  # fmt: skip
    i = wh.create_table(f"i{next(_names)}", {"id": "bigint", "s": "string"}, key="id")
    i.upsert(pa.table({"id": [5, 7], "s": ["five", "seven"]}))
    i.upsert(pa.table({"id": [7, 2**40], "s": ["SEVEN", "big"]}))
    assert sorted(i.read(["id", "s"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 5, "s": "five"}, {"id": 7, "s": "SEVEN"}, {"id": 2**40, "s": "big"}
    ]  # fmt: skip


def test_upsert_after_a_delete_inserts_the_key_again(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    old_id = t.lookup(["a"], [ROW_ID]).column(ROW_ID)[0].as_py()
    t.delete(pc.field("url") == "a")
    assert t.lookup(["a"]).num_rows == 0
    result = t.upsert(pa.table({"url": ["a"], "label": [70]}))
    assert (result.inserted, result.merged) == (1, 0)
    (row,) = t.lookup(["a"], [ROW_ID, "label", "note"]).to_pylist()
    assert row[ROW_ID] != old_id and (row["label"], row["note"]) == (70, None)
    assert sorted(_rows(t)) == ["a", "b", "c"]


def test_time_travel_reads_and_looks_up_the_old_values(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    v = t.version
    before = _rows(t)
    t.upsert(pa.table({"url": ["a", "z"], "label": [-1, 26]}))
    assert _rows(t, version=v) == before
    assert t.lookup(["a", "z"], ["label"], version=v).to_pylist() == [{"label": 1}]
    assert t.lookup(["a", "z"], ["label"]).to_pylist() == [{"label": -1}, {"label": 26}]


@pytest.mark.parametrize("undo", ["rollback", "revert"])
def test_rollback_and_revert_restore_rows_and_index(wh: omnitable.Warehouse, undo: str) -> None:
    t = _table(wh)
    v = t.version
    before = _rows(t)
    upserted = t.upsert(pa.table({"url": ["b", "d"], "label": [20, 4]})).version
    assert upserted is not None
    t.rollback(v) if undo == "rollback" else t.revert(upserted)
    assert _rows(t) == before
    assert t.lookup(["d", "b"], ["url", "label"]).to_pylist() == [{"url": "b", "label": 2}]
    again = t.upsert(pa.table({"url": ["d"], "label": [44]}))
    assert (again.inserted, again.merged) == (1, 0)
    assert t.lookup(["d"], ["label"]).to_pylist() == [{"label": 44}]
    assert t.count() == 4


def test_reverting_a_delete_never_duplicates_a_key_upserted_again(
    wh: omnitable.Warehouse,
) -> None:
    """The delete's rows would come back beside the rows a later upsert inserted for the same
    keys: the revert conflicts, nothing is committed, and the keys stay unique."""
    t = _table(wh)
    deleted = t.delete(pc.field("url").isin(["a", "c"])).version
    t.upsert(pa.table({"url": ["a"], "label": [10]}))
    v, before = t.version, _rows(t)
    with pytest.raises(omnitable.CommitConflict, match=r"bring back 1 row\(s\) .*key 'a'"):
        t.revert(deleted)
    assert t.version == v and _rows(t) == before
    assert t.lookup(["a"], ["label"]).to_pylist() == [{"label": 10}]
    t.delete(pc.field("url") == "a")
    t.revert(deleted)  # no live row holds a or c now: both come back
    assert _rows(t) == {"a": (1, "na", ["x"]), "b": (2, "nb", []), "c": (3, "nc", None)}
    assert t.lookup(["c", "a"], ["url"]).to_pylist() == [{"url": "c"}, {"url": "a"}]


def test_bad_input_commits_nothing(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    plain = wh.create_table(f"p{next(_names)}", {"url": "string"})
    ids = t.read([ROW_ID, "url"]).to_pydict()
    v, files = t.version, _files(t)
    cases = [
        (lambda: plain.upsert(pa.table({"url": ["a"]})), omnitable.ValidationError,
         "it has no key"),
        (lambda: t.upsert(pa.table({"url": ["a"]}), policy="newest"), omnitable.ValidationError,
         "Cannot upsert with policy 'newest'"),
        (lambda: t.upsert(pa.table({"url": ["a"]}), policy="no_such_module:f"),
         omnitable.ValidationError, "Cannot use merge policy"),
        (lambda: t.upsert(pa.table({"url": ["a"]}), policy=f"{policies.__name__}:nope"),
         omnitable.ValidationError, "Cannot use merge policy"),
        (lambda: t.upsert(pa.table({"label": [1]})), omnitable.ValidationError,
         r"no key column\(s\) \['url'\]"),
        (lambda: t.upsert(pa.table({ROW_ID: [ids[ROW_ID][0]], "url": ["a"]})),
         omnitable.ValidationError, "drop _ai_unique_id_"),
        (lambda: t.upsert(pa.table({"url": ["a"], "nope": [1]})), omnitable.UnknownColumnError,
         "nope"),
        (lambda: t.upsert(pa.table({"url": ["a"], "label": ["not a number"]})),
         omnitable.SchemaMismatchError, "Cannot ingest column 'label'"),
        (lambda: t.append(pa.table({"url": ["q"]}), "x"), omnitable.ValidationError,
         "it is keyed by"),
        (lambda: t.update(pa.table({ROW_ID: [ids[ROW_ID][0]], "url": ["A"]})),
         omnitable.ValidationError, "Cannot update key column 'url'"),
        (lambda: t.rename_column("url", "link"), omnitable.ValidationError, "key"),
        (lambda: t.retire("url"), omnitable.ValidationError, "key"),
    ]  # fmt: skip
    for call, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            call()
    assert t.version == v and _files(t) == files
    assert t.key == ["url"] and plain.key is None


@pytest.mark.parametrize(
    ("key", "pattern"),
    [
        ("nope", "key column 'nope' is not a column"),
        ("score", "key column 'score' has type double"),
        (["url", "url"], "key column 'url' is listed twice"),
        ([], "key must be a column name or a non-empty list"),
    ],
)
def test_create_table_with_a_bad_key_creates_nothing(
    wh: omnitable.Warehouse, key: Any, pattern: str
) -> None:
    tables = wh.tables()
    with pytest.raises(omnitable.ValidationError, match=pattern):
        wh.create_table("bad_key", {"url": "string", "score": "double"}, key=key)
    assert wh.tables() == tables


@pytest.mark.spark
def test_merging_a_feature_output_records_lineage_and_stales_its_readers(
    spark, wh: omnitable.Warehouse
) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table(f"f{next(_names)}", {"url": "string", "x": "bigint"}, key="url")
    t.upsert(pa.table({"url": ["a", "b", "c", "d"], "x": [1, 2, 3, 4]}), append_name="a")
    t.register(
        omnitable.sql_feature("twice", "x * 2", "bigint", "1"),
        omnitable.sql_feature("plus", "twice + 1", "bigint", "1"),
    )
    t.backfill("plus").run(spark)
    t.upsert(pa.table({"url": ["a"], "twice": [100]}), why="manual fix")
    assert t.status().state("a", "twice") == "done"
    assert t.status().state("a", "plus") == "stale"  # its input changed (one fragment)
    (fixed,) = [r for r in t.lineage("twice") if r.engine == "upsert"]
    assert fixed.inputs == [] and fixed.feature == "twice"
    t.backfill("plus").run(spark)
    got = t.read(["url", "twice", "plus"]).sort_by("url").to_pydict()
    assert got == {"url": ["a", "b", "c", "d"], "twice": [100, 4, 6, 8], "plus": [101, 5, 7, 9]}


def test_rows_of_an_upsert_are_a_batch_of_the_table(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    t.upsert(pa.table({"url": ["p", "q"], "label": [1, 2]}), append_name="late")
    got = pd.DataFrame(t.read([APPEND_NAME, "url"]).to_pylist())
    assert sorted(got[got[APPEND_NAME] == "late"].url) == ["p", "q"]
    v = t.version
    with pytest.raises(omnitable.AlreadyExistsError, match="Cannot append batch 'late'"):
        t.upsert(pa.table({"url": ["r"]}), append_name="late")
    with pytest.raises(omnitable.ValidationError, match="append_name must be"):
        t.upsert(pa.table({"url": ["r"]}), append_name="")
    assert t.version == v and t.lookup(["r"]).num_rows == 0


def test_keys_of_several_integer_columns_that_share_a_hash_are_never_merged(
    wh: omnitable.Warehouse, colliding_key: Callable[[int, int, int], int]
) -> None:
    """Two distinct keys of two bigint columns hashed to the same 64 bits (built on purpose):
    an upsert of the second is rejected (``key_collision``), not merged into the first's row,
    whether the first is stored or in the same input; a lookup of it finds nothing."""
    from omnitable.vocabulary.keys import key_hashes

    a1, b1, a2 = 7, 11, 8
    b2 = colliding_key(a1, b1, a2)
    hashes = key_hashes([pa.array([a1, a2], pa.int64()), pa.array([b1, b2], pa.int64())])
    assert hashes[0][0] == hashes[0][1] and hashes[1][0] == hashes[1][1]  # a real collision
    schema = {"a": "bigint", "b": "bigint", "v": "double"}
    t = wh.create_table(f"c{next(_names)}", schema, key=["a", "b"])
    t.upsert(pa.table({"a": [a1, 1], "b": [b1, 1], "v": [1.0, 5.0]}))
    result = t.upsert(pa.table({"a": [a2, 1], "b": [b2, 1], "v": [2.0, 6.0]}))
    assert (result.inserted, result.merged) == (0, 1)
    assert result.rejected.column("a").to_pylist() == [a2]
    reason = result.rejected.column("_ai_error_")[0].as_py()
    assert reason.startswith("key_collision:") and f"({a1}, {b1})" in reason
    got = sorted(tuple(r.values()) for r in t.read(["a", "b", "v"]).to_pylist())
    assert got == [(1, 1, 6.0), (a1, b1, 1.0)]  # the stored row keeps its key and value
    assert t.lookup([(a2, b2)], ["v"]).num_rows == 0
    assert t.lookup([(a1, b1)], ["v"]).to_pylist() == [{"v": 1.0}]
    assert [e["exception_type"] for e in result.error_rows] == ["key_collision"]  # error table
    fresh = wh.create_table(f"c{next(_names)}", schema, key=["a", "b"])
    both = fresh.upsert(pa.table({"a": [a1, a2], "b": [b1, b2], "v": [1.0, 2.0]}))
    assert both.inserted == 0 and fresh.read(["a"]).num_rows == 0
    reasons = sorted(r.as_py().split(":")[0] for r in both.rejected.column("_ai_error_"))
    assert reasons == ["key_collision", "key_collision"]
    mixed = fresh.upsert(pa.table({"a": [a1, a2, a1], "b": [b1, b2, b1], "v": [1.0, 2.0, 3.0]}))
    assert [r.as_py() for r in mixed.rejected.column("_ai_error_")] == [
        f"duplicate_key: key ({a1}, {b1}) occurs 2 times in this input",
        "key_collision: " + mixed.rejected.column("_ai_error_")[1].as_py().split(": ", 1)[1],
        f"duplicate_key: key ({a1}, {b1}) occurs 2 times in this input",
    ]
    assert f"key ({a2}, {b2}) has the same 64-bit hash as key ({a1}, {b1})" in (
        mixed.rejected.column("_ai_error_")[1].as_py()
    )
