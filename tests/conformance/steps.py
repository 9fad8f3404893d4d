"""Commit conformance scenarios (tests/conformance/scenarios/*.json): the base state and the
concurrent writer's steps, done with the Python API. Both runners use it: the pytest runner
(test_conformance.py, the Python committer) in-process, the ScalaTest runner
(jvm/.../write/ConformanceSuite.scala, the JVM committer) as a command line:

    python tests/conformance/steps.py prepare WAREHOUSE ROOT SCENARIO   # prints the base state
    python tests/conformance/steps.py concurrent WAREHOUSE ROOT SCENARIO BASE_NEXT_ROW_ID
    python tests/conformance/steps.py state WAREHOUSE ROOT              # batches and rows
    python tests/conformance/steps.py newdb POSTGRES_URL                # a fresh database URL

A scenario: ``base`` steps, then the committing writer (``commit``: an append, ``mode``
``replace`` for Python's replace and the JVM's INSERT OVERWRITE; or ``"op": "delete"`` of the
rows whose ``url`` or ``score`` is given, Table.delete in one attempt and the JVM's DELETE FROM,
:func:`delete_where`; or ``"op": "update"`` of the ``score`` of the row whose ``url`` is given,
Python's ``Table.update`` and the JVM's ``ColumnUpdate``, failpoint ``update.before_commit``)
takes its snapshot, the
``concurrent`` steps run and commit, then the committing writer commits; ``expect`` is its
outcome: ``version``, or a message fragment of ``conflict`` / ``not_found`` / ``exists``, and the
table's ``batches`` (sorted names) and ``rows`` afterwards.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import omnitable
from omnitable import ROW_ID

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


def delete_where(commit: dict[str, Any]) -> pc.Expression:
    """The filter of a committing delete: ``url`` or ``score`` equal to the value given (the JVM
    runner writes the same as SQL: ``WHERE url = '…'`` / ``WHERE score = …``)."""
    (column,) = [c for c in ("url", "score") if c in commit]
    return pc.field(column) == commit[column]


def apply_step(wh: omnitable.Warehouse, step: dict[str, Any], base_next: int) -> None:
    """One writer step: ``append`` (optionally ``mode`` replace, ``ids_after_base``: supplied ids
    relative to the table's next free id after the base), ``drop_table``, ``add_columns``,
    ``delete`` (the row whose ``url`` is given), ``update`` (its ``score``), ``register`` (a SQL
    feature ``name`` over ``score``), ``retire`` (``column``)."""
    op = step["op"]
    if op == "drop_table":
        wh.drop_table(TABLE)
        return
    table = wh.table(TABLE)
    if op == "append":
        data = rows(step["batch"], step["rows"])
        if "ids_after_base" in step:
            ids = pa.array([base_next + i for i in step["ids_after_base"]], pa.int64())
            data = data.add_column(0, ROW_ID, ids)
        table.append(data, step["batch"], mode=step.get("mode", "error"))
    elif op == "add_columns":
        ids = pa.array(range(step["rows"]), pa.int64())
        table.add_columns(pa.table({ROW_ID: ids, step["column"]: ["x"] * step["rows"]}))
    elif op == "delete":
        assert table.delete(pc.field("url") == step["url"]).rows == 1
    elif op == "update":
        table.update(update_data(table, step), columns=["score"])
    elif op == "register":
        table.register(omnitable.sql_feature(step["name"], "score * 2", "double", "1"))
    elif op == "retire":
        table.retire(step["column"])
    else:
        raise ValueError(f"unknown step {op!r}")


def update_data(table: omnitable.Table, step: dict[str, Any]) -> pa.Table:
    """The data of an ``update`` step: the id of the row whose ``url`` is given, its new
    ``score``."""
    (row_id,) = table.read(columns=[ROW_ID], where=pc.field("url") == step["url"])[ROW_ID]
    return pa.table({ROW_ID: pa.array([row_id.as_py()], pa.int64()), "score": [step["score"]]})


def prepare(wh: omnitable.Warehouse, scenario: dict[str, Any]) -> int:
    """Create the table and run the base steps; returns the table's next free row id."""
    wh.create_table(TABLE, SCHEMA)
    for step in scenario["base"]:
        apply_step(wh, step, 0)
    return next_row_id(wh)


def next_row_id(wh: omnitable.Warehouse) -> int:
    return int(wh.table(TABLE).record.next_row_id)


def state(wh: omnitable.Warehouse) -> dict[str, Any]:
    """What ``expect`` checks after the commit: sorted batch names and the row count."""
    if TABLE not in wh.tables():
        return {"batches": None, "rows": None}
    table = wh.table(TABLE)
    return {"batches": sorted(b.name for b in table.batches()), "rows": table.read().num_rows}


def _new_database(base_url: str) -> str:
    import psycopg

    from omnitable.catalog.address import parse_address

    base = parse_address(base_url)
    name = f"omt_conf_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**base.connect_params(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    # the URL as given (an env: password stays a reference), with the new database
    return base_url.rsplit("/", 1)[0] + "/" + name


def main(argv: list[str]) -> None:
    cmd = argv[0]
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
        elif cmd == "state":
            print(json.dumps(state(wh)))
        else:
            raise SystemExit(f"unknown command {cmd!r}")
    finally:
        wh.close()


if __name__ == "__main__":
    main(sys.argv[1:])
