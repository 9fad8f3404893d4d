"""Governance (issue 15): what compaction buys.

* (a) a batch of ``--rows`` rows (default 50,000; text and two numbers) written as
  ``--fragments`` tiny fragments (default 1,000), against the same rows after
  ``Table.maintain(["compact"])`` (one fragment): a full read in Python (median of 5 x
  ``--repeats``, interleaved) and a one-batch backfill of a SQL feature on Spark (local[2],
  warmed up; ``--repeats`` each, a new feature per run, so each run computes every row). Both
  tables read back equal (checked). Goal: >= 5x faster after. The compaction's own time is
  reported too.
* (b) hot column-group views: a table of ``--rows`` rows (x ``--view-batches`` batches) with 200
  double columns in 50 column groups; a view of 4 hot columns (one per group), refreshed by the
  ``views`` job. A 1 % filtered export (``c0 < 0.01``, 4 hot columns, written as Parquet) through
  the fresh view against the zip read (``spark.omnitable.optimizer.views.enabled=false``),
  interleaved, ``3 x --repeats`` each; both exports read back equal (checked). Goal: >= 4x.
  The same export without Spark too: ``Table.read`` (answered from the fresh view, or with the
  setting ``read.views`` off from the zip) written with pyarrow, ``20 x --repeats`` each,
  interleaved; both read the same rows (checked).
  Measured for each layout of ``--view-fragments`` (fragments per batch, default ``4,20``: a
  table as appended in quarter batches, and one appended in smaller pieces, as many small
  appends leave it before compaction). Also printed: the write floor (the exported rows written
  from memory in one task, the Spark write job alone) and zip / floor, the most any read could
  reach; the same view read through Delta; planning alone; the view's storage overhead (its
  Delta bytes / the table's data bytes) and refresh time.

* (c) a ``--columns``-column table (default 2,500 bigint columns, ``--wide-rows`` rows in 4
  fragments) stored as groups of 5 columns, and 10 columns spread over 10 groups read together
  (recorded in the access log): planning (``Table.plan``) and reading those 10 columns before
  vs after ``Table.maintain(["regroup"])`` (the 10 columns in one group, the other small groups
  merged), side by side on two copies; both read back equal (checked). The regroup's own time
  and the access log's cost per scan (one ``record_access`` against the 10-column read) are
  reported too.

Run: ./dev bench governance [--fragments 1000] [--rows 50000] [--repeats 1] [--no-spark]
     [--columns 2500] [--wide-rows 2000] [--view-batches 4] [--view-fragments 4,20]
     [--only a,b,c]
"""

from __future__ import annotations

import argparse
import shutil
import time
import uuid
from typing import Any

from benchmarks.common import (
    BENCH_DIR,
    fmt_bytes,
    fmt_ratio,
    fmt_seconds,
    report,
    smoke,
    time_interleaved,
)

VIEW_SWITCH = "spark.omnitable.optimizer.views.enabled"
VIEW_FILES_SWITCH = "spark.omnitable.optimizer.views.recorded_files"
HOT = ["c0", "c4", "c8", "c12"]  # (b): the view's columns, one of each of 4 groups


def _tables(fragments: int, rows: int, path: Any) -> tuple[Any, Any, Any, Any, float]:
    """A warehouse at ``path`` with ``tiny`` (``fragments`` fragments) and ``compacted`` (the
    same rows, then compacted); returns the compaction time too."""
    import pyarrow as pa

    import omnitable

    wh = omnitable.connect(str(path))
    data = pa.table({
        "text": [f"row {i} " + "lorem ipsum " * (i % 7) for i in range(rows)],
        "a": list(range(rows)),
        "b": [float(i) / 3 for i in range(rows)],
    })  # fmt: skip
    per_fragment = max(1, -(-rows // fragments))
    tables = []
    for name in ("tiny", "compacted"):
        t = wh.create_table(name, {"text": "string", "a": "bigint", "b": "double"})
        t.append(data, "batch", target_fragment_rows=per_fragment)
        tables.append(t)
    tiny, compacted = tables
    start = time.perf_counter()
    (result,) = compacted.maintain(["compact"])
    took = time.perf_counter() - start
    assert result.outcome == "committed", result
    assert tiny.batches()[0].fragments == fragments and compacted.batches()[0].fragments == 1
    assert tiny.read().equals(compacted.read())
    return path, wh, tiny, compacted, took


def _backfills(tiny: Any, compacted: Any, repeats: int) -> dict[str, float]:
    import omnitable

    spark = _spark(tiny.warehouse)
    counter = iter(range(10_000))

    def backfill(t: Any) -> None:
        name = f"len_{next(counter)}"
        t.register(omnitable.sql_feature(name, "length(text)", "int", "1"))
        t.backfill(name, batches=["batch"]).run(spark)

    if not smoke():
        backfill(compacted)  # warms Spark up (a 1-fragment backfill)
    return time_interleaved(
        {"tiny": lambda: backfill(tiny), "compacted": lambda: backfill(compacted)},
        repeats=repeats,
        warmup=0,
    )


def _wide(path: Any, columns: int, rows: int) -> tuple[Any, Any, list[str], float]:
    """(c): ``grouped`` (groups of 5 columns) and ``regrouped`` (the same, then regrouped after
    scans of 10 columns of 10 groups); returns the 10 columns and the regroup's time."""
    import pyarrow as pa

    import omnitable

    wh = omnitable.connect(str(path / "wide"))
    names = [f"c{i:04d}" for i in range(columns)]
    groups = {f"g{i // 5:03d}": names[i : i + 5] for i in range(0, columns, 5)}
    hot = names[:: max(5, columns // 10)][:10]
    data = pa.table({n: pa.array(range(j, j + rows), pa.int64()) for j, n in enumerate(names)})
    tables = []
    for name in ("grouped", "regrouped"):
        t = wh.create_table(name, dict.fromkeys(names, "bigint"), groups=groups)
        t.append(data, "batch", target_fragment_rows=max(1, rows // 4))
        t.read(columns=hot)  # the access log: these are read together
        tables.append(t)
    grouped, regrouped = tables
    start = time.perf_counter()
    (result,) = regrouped.maintain(["regroup"])
    took = time.perf_counter() - start
    assert result.outcome == "committed", result
    assert grouped.read(columns=hot).equals(regrouped.read(columns=hot))
    return grouped, regrouped, hot, took


def _wide_rows(args: Any, path: Any, out: dict[str, float]) -> list[tuple[str, str, str]]:
    from omnitable.format.access import record_access

    grouped, regrouped, hot, took = _wide(path, args.columns, args.wide_rows)
    plans = time_interleaved(
        {"grouped": lambda: grouped.plan(columns=hot),
         "regrouped": lambda: regrouped.plan(columns=hot)}, repeats=5 * args.repeats,
    )  # fmt: skip
    reads = time_interleaved(
        {"grouped": lambda: grouped.read(columns=hot),
         "regrouped": lambda: regrouped.read(columns=hot)}, repeats=5 * args.repeats,
    )  # fmt: skip
    ids = [(i, n) for i, n in enumerate(hot)]
    log = time_interleaved({"log": lambda: record_access(
        grouped.location, table_id="bench", branch="main", version=1, columns=ids)}, repeats=20)  # fmt: skip
    out["wide_plan_ratio"] = plans["grouped"] / plans["regrouped"]
    out["wide_read_ratio"] = reads["grouped"] / reads["regrouped"]
    out["access_log_fraction"] = log["log"] / reads["regrouped"]
    label = f"{args.columns:,} columns, 10 co-read"
    return [
        (f"(c) regroup of {args.columns:,} columns in groups of 5", fmt_seconds(took), ""),
        (f"(c) plan, {label}: before / after", fmt_ratio(out["wide_plan_ratio"]), ""),
        (f"(c) read, {label}: before", fmt_seconds(reads["grouped"]), ""),
        (f"(c) read, {label}: after", fmt_seconds(reads["regrouped"]), ""),
        ("(c) read: before / after", fmt_ratio(out["wide_read_ratio"]), ""),
        ("(c) access log entry / 10-column read", f"{out['access_log_fraction']:.1%}", "< 5%"),
    ]


def _spark(wh: Any) -> Any:
    import omnitable

    return omnitable.spark_session(
        wh,
        master="local[2]",
        **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
           "spark.databricks.delta.snapshotPartitions": "2"},
    )  # fmt: skip


def _dir_bytes(path: str) -> int:
    from pathlib import Path

    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _view_table(wh: Any, name: str, rows: int, batches: int, fragment_rows: int) -> Any:
    """A 200-column table (50 groups of 4) of ``batches`` x ``rows`` random doubles in fragments
    of ``fragment_rows`` rows, with the view ``hot`` declared over :data:`HOT`."""
    import numpy as np
    import pyarrow as pa

    groups = {f"g{g}": [f"c{g * 4 + k}" for k in range(4)] for g in range(50)}
    t = wh.create_table(name, {f"c{i}": "double" for i in range(200)}, groups=groups)
    rng = np.random.default_rng(7)
    for b in range(batches):
        cols = {f"c{i}": rng.random(rows) for i in range(200)}
        t.append(pa.table(cols), f"b{b}", target_fragment_rows=fragment_rows)
    t.create_view("hot", HOT)
    return t


def _view_times(spark: Any, t: Any, out_dir: Any, repeats: int) -> dict[str, float]:
    """The 1 % export through the view (recorded files), through Delta and from the zip, planning
    alone for each, and the write floor (the exported rows written from memory in one task),
    interleaved; checks that every export reads back equal and that the view was used."""

    def use(read: str) -> None:  # "zip", "view" (recorded files) or "delta" (the view via Delta)
        spark.conf.set(VIEW_SWITCH, str(read != "zip").lower())
        spark.conf.set(VIEW_FILES_SWITCH, str(read == "view").lower())

    def query(read: str) -> Any:
        use(read)
        return t.to_spark(spark).where("c0 < 0.01").select(*HOT)

    def export(read: str) -> None:
        query(read).write.mode("overwrite").parquet(str(out_dir / read))

    for read in ("view", "delta", "zip"):
        export(read)
    want = sorted(map(tuple, spark.read.parquet(str(out_dir / "zip")).collect()))
    for read in ("view", "delta"):
        assert sorted(map(tuple, spark.read.parquet(str(out_dir / read)).collect())) == want
        plan = query(read)._jdf.queryExecution().executedPlan().toString()
        assert "ColumnViewRead" in plan, "the view was not used"
    # the write job alone: the same rows, already in memory, in one task (the cheapest job that
    # writes them; no read can make the export cost less)
    held = spark.read.parquet(str(out_dir / "zip")).coalesce(1).cache()
    assert held.count() == len(want)
    variants = {r: (lambda r=r: export(r)) for r in ("view", "delta", "zip")}
    variants["floor"] = lambda: held.write.mode("overwrite").parquet(str(out_dir / "floor"))
    variants.update(
        {  # analysis + optimization + physical planning, no job
            f"plan_{r}": (lambda r=r: query(r)._jdf.queryExecution().executedPlan())
            for r in ("view", "delta", "zip")
        }
    )
    try:
        return time_interleaved(variants, repeats=3 * repeats)
    finally:
        held.unpersist()
        spark.conf.unset(VIEW_SWITCH)
        spark.conf.unset(VIEW_FILES_SWITCH)


def _python_times(t: Any, t_zip: Any, out_dir: Any, repeats: int) -> dict[str, float]:
    """The same export without Spark: ``Table.read`` of the hot columns under the filter, written
    with pyarrow, answered from the view (``t``) and from the zip (``t_zip``, connected with
    ``read.views`` off), interleaved; checks that both read the same rows and the view was used."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    where = pc.field("c0") < 0.01
    seen = {}
    for read, table in (("view", t), ("zip", t_zip)):
        scan = table.scan(HOT, where=where)
        assert scan.stats.view == ("hot" if read == "view" else None), scan.stats
        seen[read] = sorted(zip(*(c.to_pylist() for c in scan.table.columns), strict=True))
    assert seen["view"] == seen["zip"], "the view read other rows than the zip"
    out_dir.mkdir(parents=True, exist_ok=True)

    def export(table: Any, name: str) -> None:
        pq.write_table(table.read(HOT, where=where), out_dir / f"{name}.parquet")

    return time_interleaved(
        {"view": lambda: export(t, "view"), "zip": lambda: export(t_zip, "zip")},
        repeats=20 * repeats,
    )


def _views(
    wh: Any, wh_zip: Any, path: Any, args: Any, per_batch: int, spark: Any
) -> tuple[list[Any], dict]:
    """(b) for one layout (``per_batch`` fragments per batch): export through a fresh view vs the
    zip read, on Spark and in Python (``wh_zip``: the warehouse with ``read.views`` off); report
    rows and figures."""
    rows, batches, repeats = args.rows, args.view_batches, args.repeats
    fragment_rows = max(1, -(-rows // per_batch))
    t = _view_table(wh, f"wide{per_batch}", rows, batches, fragment_rows)
    start = time.perf_counter()
    (res,) = t.maintain(["views"], options={"views": {"spark": spark}})
    refresh = time.perf_counter() - start
    assert res.outcome == "committed", res
    times = _view_times(spark, t, path / f"export{per_batch}", repeats)
    py = _python_times(t, wh_zip.table(t.name), path / f"py{per_batch}", repeats)
    view_dir = t._ctx.location.child_path(t.views()[0]["path"])
    view_bytes = _dir_bytes(view_dir)
    data_bytes = _dir_bytes(t._ctx.location.path) - view_bytes
    view_files = t.views()[0]["data_files"]  # the files its refresh recorded, which it reads
    assert view_files, "the view's data files were not recorded"
    zip_plan = t.plan(HOT)  # the fragments, and the files that hold the hot columns
    fragments = zip_plan.fragments_total
    figures = {
        "view_export_ratio": times["zip"] / times["view"],
        "view_run_ratio": max(1e-3, times["zip"] - times["plan_zip"])
        / max(1e-3, times["view"] - times["plan_view"]),
        "view_ceiling": times["zip"] / times["floor"],
        "view_overhead": view_bytes / max(1, data_bytes),
        "py_view_export_ratio": py["zip"] / py["view"],
    }
    label = f"{rows * batches:,} rows x 200 columns / 50 groups, {fragments:,} fragments"
    rows_out = [
        (f"(b) {label}: view refresh", fmt_seconds(refresh), ""),
        ("(b) 1 % export of 4 hot columns, zip read", fmt_seconds(times["zip"]), ""),
        ("(b) 1 % export of 4 hot columns, fresh view", fmt_seconds(times["view"]), ""),
        ("(b) export: zip / view", fmt_ratio(figures["view_export_ratio"]), ">= 4x"),
        ("(b) write floor: the exported rows written from memory, one task",
         fmt_seconds(times["floor"]), ""),
        ("(b) zip / write floor (the most any read could reach)",
         fmt_ratio(figures["view_ceiling"]), ""),
        ("(b) the same view read through Delta (recorded files off)", fmt_seconds(times["delta"]),
         ""),
        ("(b) export: zip / view through Delta", fmt_ratio(times["zip"] / times["delta"]), ""),
        ("(b) planning only (executedPlan), zip read", fmt_seconds(times["plan_zip"]), ""),
        ("(b) planning only (executedPlan), fresh view", fmt_seconds(times["plan_view"]), ""),
        ("(b) planning only, view through Delta", fmt_seconds(times["plan_delta"]), ""),
        ("(b) export minus planning: zip / view", fmt_ratio(figures["view_run_ratio"]), ""),
        ("(b) Python export (Table.read + pyarrow write), zip read", fmt_seconds(py["zip"]), ""),
        ("(b) Python export, fresh view", fmt_seconds(py["view"]), ""),
        ("(b) Python export: zip / view", fmt_ratio(figures["py_view_export_ratio"]), ">= 4x"),
        ("(b) files read: view / zip (fragments x 4 hot groups)",
         f"{view_files:,} / {zip_plan.files:,}", ""),
        ("(b) view storage", fmt_bytes(view_bytes), ""),
        ("(b) view storage / table data", f"{100 * figures['view_overhead']:.1f} %", ""),
    ]  # fmt: skip
    return rows_out, figures


def _view_rows(args: Any, path: Any, out: dict[str, float]) -> list[tuple[str, str, str]]:
    """(b) for each layout of ``--view-fragments``: the first one's figures under plain keys,
    the others' with ``_<n>`` (fragments per batch) appended."""
    import omnitable

    wh = omnitable.connect(str(path / "views"))
    wh_zip = omnitable.connect(str(path / "views"), settings={"read.views": False})
    rows: list[tuple[str, str, str]] = []
    try:
        spark = _spark(wh)
        for n, per_batch in enumerate(args.view_fragments):
            got, figures = _views(wh, wh_zip, path, args, per_batch, spark)
            rows += got
            out.update({(k if n == 0 else f"{k}_{per_batch}"): v for k, v in figures.items()})
    finally:
        wh_zip.close()
        wh.close()
    return rows


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="./dev bench governance")
    parser.add_argument("--fragments", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=1, help="backfills (reads: 5x this)")
    parser.add_argument("--columns", type=int, default=2500, help="(c): the wide table")
    parser.add_argument("--wide-rows", type=int, default=2000, help="(c): its rows")
    parser.add_argument(
        "--no-spark", action="store_true", help="skip the Spark parts (backfill, views)"
    )
    parser.add_argument("--view-batches", type=int, default=4, help="(b): batches of --rows rows")
    parser.add_argument(
        "--view-fragments",
        default="4,20",
        help="(b): layouts to measure, as fragments per batch (default 4,20)",
    )
    parser.add_argument("--only", default="a,b,c", help="parts to run, of a,b,c (default all)")
    args = parser.parse_args(argv)
    try:
        layouts = [int(x) for x in args.view_fragments.split(",") if x.strip()]
    except ValueError:
        layouts = []
    if not layouts or min(layouts) < 1 or len(set(layouts)) < len(layouts):
        parser.error(
            "--view-fragments takes distinct positive integers, e.g. 4,20; "
            f"got {args.view_fragments!r}"
        )
    args.view_fragments = layouts
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts or parts - {"a", "b", "c"}:
        parser.error(f"--only takes parts of a,b,c; got {args.only!r}")
    path = BENCH_DIR / f"governance-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    out: dict[str, float] = {}
    rows: list[tuple[str, str, str]] = []
    try:
        if "a" in parts:
            rows += _compaction_rows(args, path, out)
        if "b" in parts and not args.no_spark:
            rows += _view_rows(args, path, out)
        if "c" in parts:
            rows += _wide_rows(args, path, out)
        report("governance", rows)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return out


def _compaction_rows(args: Any, path: Any, out: dict[str, float]) -> list[tuple[str, str, str]]:
    """(a): full reads (and, with Spark, one-batch backfills) before vs after compaction."""
    _, wh, tiny, compacted, took = _tables(args.fragments, args.rows, path / "compaction")
    try:
        reads = time_interleaved(
            {"tiny": lambda: tiny.read(), "compacted": lambda: compacted.read()},
            repeats=5 * args.repeats,
        )
        out["read_ratio"] = reads["tiny"] / reads["compacted"]
        rows = [
            (f"(a) compaction of {args.fragments:,} fragments ({args.rows:,} rows)",
             fmt_seconds(took), ""),
            (f"(a) full read, {args.fragments:,} fragments", fmt_seconds(reads["tiny"]), ""),
            ("(a) full read, compacted", fmt_seconds(reads["compacted"]), ""),
            ("(a) full read: before / after", fmt_ratio(out["read_ratio"]), ">= 5x"),
        ]  # fmt: skip
        if not args.no_spark:
            fills = _backfills(tiny, compacted, args.repeats)
            out["backfill_ratio"] = fills["tiny"] / fills["compacted"]
            rows += [
                (f"(a) one-batch backfill, {args.fragments:,} fragments",
                 fmt_seconds(fills["tiny"]), ""),
                ("(a) one-batch backfill, compacted", fmt_seconds(fills["compacted"]), ""),
                ("(a) backfill: before / after", fmt_ratio(out["backfill_ratio"]), ">= 5x"),
            ]  # fmt: skip
        return rows
    finally:
        wh.close()
