"""Property test of every maintenance job against its model (docs/governance.md): random appends
(new batches and replaces), deletes, updates and (on Spark) backfills, interleaved on one table
with compactions, folds, regroups and expiries (some of them
crashed in a phase: after Prepare, in Execute, before the commit, inside the commit transaction,
after it), read back like the same writes on a twin table without maintenance, at the head and
at every version still reachable; a version an expiry gave up is marked ``expired`` by history()
and refuses reads. SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import NotFoundError
from omnitable.vocabulary.names import ROW_ID

pytestmark = pytest.mark.shared_warehouse

JOBS = ("compact", "fold", "expire", "regroup")
POINTS = {  # the failpoints of each phase a job passes
    "compact": ("governance.after_prepare", "governance.after_file", "governance.after_execute",
                "governance.before_commit", "commit.mid_insert", "commit.before_end",
                "commit.after_commit"),
    "expire": ("governance.after_prepare", "governance.after_execute", "expire.mid_commit",
               "expire.before_end", "commit.after_commit"),
}  # fmt: skip
POINTS["fold"] = POINTS["regroup"] = POINTS["compact"]


class Crash(Exception):
    """What a crash injected at a failpoint raises (in-process: the transaction rolls back as
    it does when the process dies)."""


WRITES = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 7), st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(2, 5), st.integers(0, 4)),
    st.tuples(st.just("update"), st.integers(0, 50), st.integers(1, 4)),
)
MAINTENANCE = st.tuples(  # job, its option, the phase it crashes in (-1: none)
    st.sampled_from(JOBS), st.integers(1, 8), st.one_of(st.just(-1), st.integers(0, 6))
)
OPS = st.lists(st.one_of(WRITES, MAINTENANCE), min_size=2, max_size=10)
_names = itertools.count()


def _by_batch(t: omnitable.Table, version: int | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every batch's rows (id, every column) in read order."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for r in t.read(version=version).to_pylist():
        row = tuple(v for k, v in sorted(r.items()) if k != "_ai_append_name_")
        out.setdefault(r["_ai_append_name_"], []).append(row)
    return out


def _write(t: omnitable.Table, i: int, op: str, a: int, b: int) -> None:
    if op == "append" and a:
        xs = [i * 100 + k for k in range(a)]
        batch = f"b{i}" if a % 2 else f"b{i % 3}"  # a new batch, or one replaced
        t.append(pa.table({"x": xs, "s": [f"s{x}" for x in xs]}), batch, mode="replace",
                 target_fragment_rows=b)  # fmt: skip
    elif op == "delete":
        t.delete((pc.field("x") - (pc.field("x") / a) * a) == b)  # x % a == b
    elif op == "update":
        ids = sorted(t.read(columns=[ROW_ID]).column(0).to_pylist())
        if ids:
            pick = sorted(set(np.random.default_rng(a).choice(ids, min(b, len(ids)))))
            t.update(pa.table({ROW_ID: pick, "s": [f"u{i}"] * len(pick)}))


def _maintain(t: omnitable.Table, job: str, a: int, crash: int) -> None:
    options = {
        "compact": {"target_fragment_rows": a},
        "fold": {"min_deleted_fraction": 0.01},
        "expire": {"retain_last": max(1, a % 4)},
        # alternately one group per column and both columns in one group: files rewritten
        "regroup": {"groups": {"gx": ["x"], "gs": ["s"]} if a % 2 else {"gxs": ["x", "s"]}},
    }[job]
    if crash < 0:
        t.maintain([job], options={job: options})
        return
    point = POINTS[job][crash % len(POINTS[job])]

    def fail() -> None:
        raise Crash(point)

    with hooked(point, fail), contextlib.suppress(Crash):
        t.maintain([job], options={job: options})


def _check(
    wh: omnitable.Warehouse, ops: list[tuple[str, int, int]], spark: Any = None
) -> omnitable.Table:
    """Run ``ops`` on a twin without maintenance and on a table with it; compare them at every
    version (``spark``: the ``backfill`` op computes feature SLEN on both)."""
    n = next(_names)
    plain = wh.create_table(f"pm{n}_{os.getpid()}", {"x": "bigint", "s": "string"})
    kept = wh.create_table(f"km{n}_{os.getpid()}", {"x": "bigint", "s": "string"})
    if spark is not None:
        plain.register(SLEN)
        kept.register(SLEN)
    states: dict[int, dict[str, list[tuple[Any, ...]]]] = {kept.version: {}}
    for i, (op, a, b) in enumerate([("append", 6, 1), *ops]):  # start with fragments to compact
        if op in JOBS:
            _maintain(kept, op, a, b)
        elif op == "backfill":
            plain.backfill(["slen"]).run(spark)
            kept.backfill(["slen"]).run(spark)
        else:
            _write(plain, i, op, a, b)
            _write(kept, i, op, a, b)
        states[kept.version] = _by_batch(plain)
        assert _by_batch(kept) == states[kept.version], (i, op)
    expired = {h.version for h in kept.history() if h.expired}
    assert kept.version not in expired
    for version, expected in states.items():
        if version in expired:
            with pytest.raises(NotFoundError, match="expired"):
                kept.read(version=version)
        else:
            assert _by_batch(kept, version) == expected, version
    return kept


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS)
def test_maintenance_reads_like_no_maintenance_at_every_version(
    wh: omnitable.Warehouse, ops: list[tuple[str, int, int]]
) -> None:
    _check(wh, ops)


def test_regroups_crashed_in_every_phase(wh: omnitable.Warehouse) -> None:
    """A fixed sequence: regroups that commit (both column layouts, moving files each time)
    among writes, and one crashed at each phase, read like the twin at every version."""
    crashes = [("regroup", 1, c) for c in range(len(POINTS["regroup"]))]
    ops = [("regroup", 1, -1), ("delete", 3, 1), ("regroup", 2, -1), ("update", 5, 2),
           *crashes, ("regroup", 1, -1), ("append", 3, 1), ("regroup", 2, -1)]  # fmt: skip
    kept = _check(wh, ops)
    # the crash after the commit committed (the regroup after it has nothing left to do)
    assert [h.op for h in kept.history()][::-1] == [
        "create", "append", "regroup", "delete", "regroup", "update", "regroup", "append",
        "regroup"]  # fmt: skip


SLEN = omnitable.sql_feature("slen", "length(s)", "int", "1")


@pytest.mark.spark
def test_with_backfills(wh: omnitable.Warehouse, request: pytest.FixtureRequest) -> None:
    """Backfills (on Spark) among the writes, one fixed sequence (a backfill costs seconds):
    computed on compacted fragments, then folded (one fold crashed) and expired, the features
    read back equal too. SQLite only (the backends are compared above)."""
    if not wh.catalog.store.is_sqlite:
        pytest.skip("the backend comparison is the test above")
    ops = [("append", 5, 2), ("update", 7, 3), ("compact", 4, 3), ("compact", 4, -1),
           ("backfill", 0, 0), ("delete", 3, 1), ("fold", 1, 2), ("fold", 1, -1),
           ("expire", 2, 3), ("expire", 1, -1)]  # fmt: skip
    _check(wh, ops, request.getfixturevalue("spark"))
