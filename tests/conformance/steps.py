"""Commit conformance scenarios (tests/conformance/scenarios/*.json): the base state and the
concurrent writer's steps, done with the Python API. Both runners use it: the pytest runner
(test_conformance.py, the Python committer) in-process, the ScalaTest runner
(jvm/.../write/ConformanceSuite.scala, the JVM committer) as a command line:

    python tests/conformance/steps.py prepare WAREHOUSE ROOT SCENARIO   # prints the base state
    python tests/conformance/steps.py concurrent WAREHOUSE ROOT SCENARIO BASE_NEXT_ROW_ID
    python tests/conformance/steps.py state WAREHOUSE ROOT              # batches, rows, columns
    python tests/conformance/steps.py newdb POSTGRES_URL                # a fresh database URL
    python tests/conformance/steps.py history WAREHOUSE ROOT SEED       # a random small history
    python tests/conformance/steps.py rollback WAREHOUSE ROOT VERSION   # Table.rollback
    python tests/conformance/steps.py revert WAREHOUSE ROOT VERSION     # Table.revert (or its error)
    python tests/conformance/steps.py dump WAREHOUSE ROOT [BRANCH]      # rows and history
    python tests/conformance/steps.py run WAREHOUSE ROOT STEPS_JSON     # a list of steps
    python tests/conformance/steps.py merge WAREHOUSE ROOT SOURCE       # Table.merge into main

    python tests/conformance/steps.py around WAREHOUSE ROOT SCENARIO BASE_NEXT_ROW_ID [PAUSE_DIR]

    python tests/conformance/steps.py serve    # every command above, in one long-lived process

``serve`` reads one JSON request a line on stdin, ``{"args": [COMMAND, ARG, ...]}`` (the command
line above without the script), runs it in this process and answers one JSON line on stdout:
``{"out": "..."}`` (what the command prints) or ``{"error": "..."}`` (its traceback; the process
goes on). Anything else written to stdout (by the library, Spark, child processes) goes to stderr.
The JVM suites use it (jvm/.../PythonSteps.scala), so the imports, and Spark for backfill steps,
start once per suite, not once per step.

A scenario: ``base`` steps, then the committing writer (``commit``: an append, ``mode``
``replace`` for Python's replace and the JVM's INSERT OVERWRITE, ``ids_after_base`` for supplied
ids as in the steps; or ``"op": "delete"`` of the
rows whose ``url`` or ``score`` is given, Table.delete in one attempt and the JVM's DELETE FROM,
:func:`delete_where`; or ``"op": "update"`` of the ``score`` of the row whose ``url`` is given,
Python's ``Table.update`` and the JVM's ``ColumnUpdate``, failpoint ``update.before_commit``; or
``{"op": "merge", "url": U, "score": S}`` or ``{"op": "merge", "delete_url": U}``: the JVM's
``MERGE INTO … WHEN MATCHED THEN UPDATE SET score`` / ``… THEN DELETE`` of that row, whose
Python reference is the ``update`` / ``delete`` above (with ``"insert": {"batch": B, "rows": N}``
also ``WHEN NOT MATCHED THEN INSERT`` of :func:`rows` ``(B, N)`` as the new batch ``B``, in the
same commit; its Python reference appends them first, failpoint ``append.before_commit``); or
``{"op": "rollback", "to": N}``: Table.rollback / CALL system.rollback; or ``{"op": "revert",
"version": N}``, optionally with ``dependents``: Table.revert / CALL system.revert; or
``{"op": "merge_branch", "source": B}``, optionally with ``strategy``: Table.merge of branch B
into main / CALL system.merge_branch; or ``{"op": "backfill", "feature": F}``: a backfill of the
SQL feature F, Python's ``Table.backfill([F]).run(spark)`` / the JVM's ``CALL
system.backfill('web', F)``, failpoint ``backfill.before_commit``, after it computed) takes its
snapshot, the ``concurrent`` steps run and commit, then the committing writer commits;
``expect`` is its outcome: ``version``, or a message fragment of ``conflict`` / ``not_found`` /
``exists`` / ``invalid``, and the table's ``batches`` (sorted names) and ``rows`` afterwards, and
when given its ``columns`` (sorted), ``status`` (derived column -> batch -> done / stale /
missing / partial) and ``batch_order``: ``[name, read position]`` of each batch in read order
(``Table.batches()``; docs/catalog.md, "Read order").

``around`` (optional) are steps that start before the committing writer and commit after it: a
backfill planned (and computed) on the base state that reaches its commit (failpoint
``backfill.before_commit``) before the committing writer starts, and commits once it is done.
The runners hold it there: in-process with a hook, across processes with the failpoint's
``pause:DIR`` action (the ``around`` command: set in its environment, or given as PAUSE_DIR, for
that command only, so one ``serve`` process, one Spark session, runs the around steps of every
scenario of a suite). ``around_expect`` is the backfill's own outcome
(:func:`run_around`): absent, it commits; ``{"conflict": fragment}``, it refuses its commit
(nothing of it lands) because the committing writer changed what its plan decided on or read.

A scenario with ``"key": "url"`` makes the table keyed by ``url`` (its base steps then upsert:
keyed tables take no append); the committing writer is then ``{"op": "upsert", "batch": B,
"urls": [...], "score": S}``: Python's ``Table.upsert`` of those urls with score S (one attempt,
failpoint ``upsert.before_commit``; the real one re-plans on a conflict, a Spark statement cannot)
and the JVM's keyed ``MERGE INTO … ON t.url = s.url WHEN MATCHED THEN UPDATE SET score … WHEN NOT
MATCHED THEN INSERT`` (failpoint ``merge.before_commit``), new keys as batch B. Upserts race no
append: both implementations refuse appends to keyed tables. Python has no maintenance operations
(compaction, expiry) yet.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import sys
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import CommitConflict, OmniTableError

SCENARIOS = Path(__file__).parent / "scenarios"
TABLE = "web"
SCHEMA = {"url": "string", "score": "double"}


def load(name: str) -> dict[str, Any]:
    scenario: dict[str, Any] = json.loads((SCENARIOS / f"{name}.json").read_text("utf-8"))
    return scenario


def names() -> list[str]:
    return sorted(p.stem for p in SCENARIOS.glob("*.json"))


def rows(batch: str, n: int) -> pa.Table:
    """The ``n`` rows an append of ``batch`` writes (the same in both runners)."""
    return pa.table(
        {"url": [f"{batch}-{i}" for i in range(n)], "score": [float(i) for i in range(n)]}
    )


def commit_rows(step: dict[str, Any], base_next: int) -> pa.Table:
    """The rows of an append step or committing append: :func:`rows`, with ``ids_after_base``
    as supplied ids relative to the table's next free id after the base (the JVM runner adds
    the same ``_ai_unique_id_`` column to its DataFrame)."""
    data = rows(step["batch"], step["rows"])
    if "ids_after_base" in step:
        ids = pa.array([base_next + i for i in step["ids_after_base"]], pa.int64())
        data = data.add_column(0, ROW_ID, ids)
    return data


def upsert_data(step: dict[str, Any]) -> pa.Table:
    """The rows of an ``upsert`` step or committing upsert: each of ``urls`` with ``score``."""
    urls = step["urls"]
    return pa.table({"url": urls, "score": [float(step.get("score", 1.0))] * len(urls)})


def delete_where(commit: dict[str, Any]) -> pc.Expression:
    """The filter of a committing delete: ``url`` or ``score`` equal to the value given (the JVM
    runner writes the same as SQL: ``WHERE url = '…'`` / ``WHERE score = …``)."""
    (column,) = [c for c in ("url", "score") if c in commit]
    return pc.field(column) == commit[column]


def apply_step(wh: omnitable.Warehouse, step: dict[str, Any], base_next: int) -> None:
    """One writer step: ``upsert`` (``urls`` with ``score`` into a keyed table, new ones as
    batch ``batch``), ``append`` (optionally ``mode`` replace, ``ids_after_base``: supplied ids
    relative to the table's next free id after the base), ``drop_table``, ``add_columns``,
    ``delete`` (the row whose ``url`` is given), ``update`` (its ``score``), ``register`` (a SQL
    feature ``name``, a double: ``expr``, default ``score * 2``, at ``version``, default 1), ``retire`` (``column``), ``backfill`` (``feature``, on
    Spark), ``rollback`` / ``revert`` (``version``), ``create_branch`` (``name``), ``merge``
    (branch ``source`` into main), ``create_table`` (another table ``name`` keyed by ``key``).
    ``branch``: the step writes to that branch (default main)."""
    op = step["op"]
    if op == "drop_table":
        wh.drop_table(TABLE)
        return
    if op == "create_table":  # another table, keyed by ``key``
        wh.create_table(step["name"], SCHEMA, key=step["key"])
        return
    table = wh.table(TABLE)
    if "branch" in step:
        table = table.branch(step["branch"])
    if op == "upsert":  # a keyed table's rows: new urls as batch ``batch``
        table.upsert(upsert_data(step), append_name=step["batch"])
    elif op == "append":
        data = commit_rows(step, base_next)
        table.append(data, step["batch"], mode=step.get("mode", "error"))
    elif op in _DATA_OPS:
        _DATA_OPS[op](table, step)
    elif op in _HISTORY_OPS:
        _HISTORY_OPS[op](table, step)
    else:
        raise ValueError(f"unknown step {op!r}")


def _add_columns(table: omnitable.Table, step: dict[str, Any]) -> None:
    ids = pa.array(range(step["rows"]), pa.int64())
    table.add_columns(pa.table({ROW_ID: ids, step["column"]: ["x"] * step["rows"]}))


def _delete(table: omnitable.Table, step: dict[str, Any]) -> None:
    assert table.delete(pc.field("url") == step["url"]).rows == 1


def update_data(table: omnitable.Table, step: dict[str, Any]) -> pa.Table:
    """The data of an ``update`` step: the id of the row whose ``url`` is given, its new
    ``score``."""
    (row_id,) = table.read(columns=[ROW_ID], where=pc.field("url") == step["url"])[ROW_ID]
    return pa.table({ROW_ID: pa.array([row_id.as_py()], pa.int64()), "score": [step["score"]]})


def _update(table: omnitable.Table, step: dict[str, Any]) -> None:
    table.update(update_data(table, step), columns=["score"])


def _backfill(table: omnitable.Table, step: dict[str, Any]) -> None:
    from pyspark.sql import SparkSession

    # the test process's session (pytest), else a small local one (the JVM runner's subprocess,
    # one for all its steps: the PostgreSQL test server is in its static configuration, as in
    # tests/conftest.py, so that an env: password is read for any database on it)
    conf: dict[str, Any] = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if pg := os.environ.get("OMNITABLE_TEST_POSTGRES_URL"):
        conf["spark.omnitable.warehouses.test_postgres"] = pg
    spark = SparkSession.getActiveSession() or omnitable.spark_session(
        table.warehouse, master="local[1]", **conf
    )
    table.backfill(step["feature"]).run(spark)


_DATA_OPS: dict[str, Callable[[omnitable.Table, dict[str, Any]], Any]] = {
    "add_columns": _add_columns,
    "delete": _delete,
    "update": _update,
    "register": lambda t, s: t.register(
        omnitable.sql_feature(
            s["name"], s.get("expr", "score * 2"), "double", s.get("version", "1")
        )
    ),
    "retire": lambda t, s: t.retire(s["column"]),
    "backfill": _backfill,
}
_HISTORY_OPS: dict[str, Callable[[omnitable.Table, dict[str, Any]], Any]] = {
    "rollback": lambda t, s: t.rollback(s["version"]),
    "revert": lambda t, s: t.revert(s["version"]),
    "create_branch": lambda t, s: t.create_branch(s["name"]),
    "merge": lambda t, s: t.merge(s["source"]),
}


def run_around(wh: omnitable.Warehouse, scenario: dict[str, Any], base_next: int) -> None:
    """The ``around`` steps, and their outcome checked against ``around_expect`` (both runners:
    in-process for pytest, the ``around`` command for the JVM runner, which fails on a non-zero
    exit)."""
    expect = scenario.get("around_expect", {})
    try:
        for step in scenario.get("around", []):
            apply_step(wh, step, base_next)
    except CommitConflict as exc:
        if "conflict" not in expect or expect["conflict"] not in str(exc):
            raise
        return
    if "conflict" in expect:
        raise AssertionError(f"the around steps committed; expected a conflict: {expect}")


def prepare(wh: omnitable.Warehouse, scenario: dict[str, Any]) -> int:
    """Create the table and run the base steps; returns the table's next free row id."""
    wh.create_table(TABLE, SCHEMA, key=scenario.get("key"))
    for step in scenario["base"]:
        apply_step(wh, step, 0)
    return next_row_id(wh)


def next_row_id(wh: omnitable.Warehouse) -> int:
    return int(wh.table(TABLE).record.next_row_id)


def state(wh: omnitable.Warehouse) -> dict[str, Any]:
    """What ``expect`` checks after the commit: sorted batch names, the row count, the columns,
    the status grid and the batches in read order with their read positions."""
    if TABLE not in wh.tables():
        return {"batches": None, "rows": None, "columns": None, "status": None,
                "batch_order": None}  # fmt: skip
    table = wh.table(TABLE)
    data = table.read()
    grid = table.status()
    status = {c: {b: grid.state(b, c) for b in grid.batches} for c in grid.columns}
    positions = {b.name: b.position for b in table.snapshot().batches}
    return {
        "batch_order": [[b.name, positions[b.name]] for b in table.batches()],
        "batches": sorted(b.name for b in table.batches()),
        "rows": data.num_rows,
        "columns": sorted(c for c in data.column_names if not c.startswith("_ai_")),
        "status": status,
    }


def random_history(wh: omnitable.Warehouse, seed: int) -> None:
    """A small random history of appends, replaces, deletes, updates, added columns and
    registered features (the same for a seed), for rollback parity tests."""
    rng = random.Random(seed)
    wh.create_table(TABLE, SCHEMA)
    apply_step(wh, {"op": "append", "batch": "b0", "rows": 4}, 0)
    batches, added, registered = ["b0"], 0, False
    for i in range(rng.randint(3, 6)):
        table = wh.table(TABLE)
        live = [str(u) for u in table.read(columns=["url"])["url"].to_pylist()]
        kind = rng.choice(
            ["append", "append", "replace", "delete", "update", "add_columns", "register"]
        )
        if kind == "append" or not live:
            batches.append(f"b{i + 1}")
            apply_step(wh, {"op": "append", "batch": batches[-1], "rows": rng.randint(1, 4)}, 0)
        elif kind == "replace":
            name = rng.choice(batches)
            apply_step(
                wh, {"op": "append", "batch": name, "rows": rng.randint(1, 3), "mode": "replace"}, 0
            )
        elif kind == "delete":
            apply_step(wh, {"op": "delete", "url": rng.choice(live)}, 0)
        elif kind == "update":
            apply_step(wh, {"op": "update", "url": rng.choice(live), "score": rng.random()}, 0)
        elif kind == "add_columns" and added < 2:
            ids = table.read(columns=[ROW_ID])[ROW_ID]
            table.add_columns(pa.table({ROW_ID: ids, f"extra{added}": [f"x{i}"] * len(ids)}))
            added += 1
        elif kind == "register" and not registered:
            apply_step(wh, {"op": "register", "name": "double"}, 0)
            registered = True
        else:
            apply_step(wh, {"op": "delete", "url": rng.choice(live)}, 0)


def dump(wh: omnitable.Warehouse, branch: str = "main") -> dict[str, Any]:
    """The table's rows on ``branch`` (sorted by row id, every column) and its history without
    times and ids: what a rollback or a merge must leave the same in both implementations."""
    table = wh.table(TABLE).branch(branch)
    data = table.read().sort_by(ROW_ID)
    history = [
        {"version": c.version, "parent": c.parent_version, "op": c.op, "summary": c.summary_json,
         "branch": c.branch}
        for c in table.history()
    ]  # fmt: skip
    return {"rows": data.to_pylist(), "columns": data.column_names, "history": history,
            "batches": sorted((b.name, b.rows) for b in table.batches())}  # fmt: skip


def database_prefix() -> str:
    """The prefix of the databases :func:`_new_database` makes from this checkout: the JVM suites
    do not drop theirs, so the next run's fixture (tests/spark/fixtures/make_warehouses.py) drops
    every database with this prefix before the suites start."""
    checkout = hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:8]
    return f"omt_conf_{checkout}_"


def _new_database(base_url: str) -> str:
    import psycopg

    from omnitable.catalog.address import parse_address

    base = parse_address(base_url)
    name = f"{database_prefix()}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**base.connect_params(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    # the URL as given (an env: password stays a reference), with the new database
    return base_url.rsplit("/", 1)[0] + "/" + name


def serve(run: Callable[[list[str]], None]) -> None:
    """Answer requests (``{"args": [...]}``, one JSON line each) on stdin until it closes, each by
    ``run(args)`` (a script's ``main``) here; stdout carries only the answers (fd 1 is pointed at
    stderr). tests/spark/fixtures/dml_steps.py serves its commands with it too."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # prints of the library, Spark's JVM and any child processes go to stderr
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(answer(line, run)) + "\n")
            answers.flush()


def answer(line: str, run: Callable[[list[str]], None]) -> dict[str, str]:
    """One request's answer: ``out`` (what the command printed) or ``error`` (its traceback)."""
    out = io.StringIO()
    try:
        args = json.loads(line)["args"]
        with contextlib.redirect_stdout(out):
            run([str(a) for a in args])
    except (Exception, SystemExit):  # a failed step is an answer; the server keeps serving
        return {"error": traceback.format_exc()}
    return {"out": out.getvalue()}


@contextlib.contextmanager
def _paused_at_backfill_commit(folder: str | None) -> Any:
    """With ``folder``: failpoint ``backfill.before_commit=pause:<folder>`` while in the block
    (the first backfill reaching its commit waits there for ``<folder>/backfill.before_commit.go``)."""
    if folder is None:
        yield
        return
    key, before = "OMNITABLE_FAILPOINTS", os.environ.get("OMNITABLE_FAILPOINTS")
    os.environ[key] = f"backfill.before_commit=pause:{folder}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def main(argv: list[str]) -> None:
    cmd = argv[0]
    if cmd == "serve":
        serve(main)
        return
    if cmd == "newdb":
        print(_new_database(argv[1]))
        return
    wh = omnitable.connect(argv[1], root=argv[2] or None)
    try:
        if cmd == "prepare":
            print(json.dumps({"next_row_id": prepare(wh, load(argv[3]))}))
        elif cmd == "concurrent":
            for step in load(argv[3])["concurrent"]:
                apply_step(wh, step, int(argv[4]))
        elif cmd == "around":
            with _paused_at_backfill_commit(argv[5] if len(argv) > 5 else None):
                run_around(wh, load(argv[3]), int(argv[4]))
        elif cmd == "state":
            print(json.dumps(state(wh)))
        elif cmd == "history":
            random_history(wh, int(argv[3]))
            print(json.dumps({"head": wh.table(TABLE).history(limit=1)[0].version}))
        elif cmd == "rollback":
            print(json.dumps({"version": wh.table(TABLE).rollback(int(argv[3]))}))
        elif cmd == "revert":
            try:
                print(json.dumps({"version": wh.table(TABLE).revert(int(argv[3]))}))
            except OmniTableError as exc:
                print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        elif cmd == "dump":
            print(json.dumps(dump(wh, *argv[3:4]), sort_keys=True, default=str))
        elif cmd == "run":
            for step in json.loads(argv[3]):
                apply_step(wh, step, 0)
        elif cmd == "merge":
            result = wh.table(TABLE).merge(argv[3])
            print(json.dumps({"version": result.version, "fast_forward": result.fast_forward}))
        else:
            raise SystemExit(f"unknown command {cmd!r}")
    finally:
        wh.close()


if __name__ == "__main__":
    main(sys.argv[1:])
