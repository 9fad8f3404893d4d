"""Branches (issue 13): branch creation against table size, and merging two back-filled
branches against re-running a backfill.

* (a) ``Table.create_branch`` on tables of ``--sizes`` fragments (default 1,000, 100,000 and
  1,000,000; synthetic catalog rows as in the metadata benchmark: 3 column groups, no data
  file). Median of ``--repeats`` creations per size, and the catalog rows each wrote; the
  ratio to the smallest table says whether the time depends on the table's size (goal:
  independent, <= 50 ms). Up to 100,000 fragments, also a full-scan plan of 4 columns on the
  new branch against the same plan on main (a branch's snapshot also checks ``removals``).
* (b) real data: a table of ``--real-fragments`` (default 200) fragments of 100 rows of text, two features
  registered on main; branch ``a`` back-fills ``f_len`` and branch ``b`` back-fills
  ``f_words`` on Spark (local[2]). Measured side by side: the time of ``b``'s backfill (what
  re-running it costs) and of merging ``a`` (a fast-forward) then ``b`` (a three-way merge
  adopting every ``f_words`` cell) into main; both features are then done on main and read
  the values the backfills computed (checked). Goal: merge >= 100x faster.
* (c) the merge at the issue's scale: ``--merge-fragments`` (default 100,000) synthetic
  fragments; branch ``a`` replaces the feature's files of every fragment and branch ``b`` the
  files of another column group (one commit each, catalog only); merging ``a`` then ``b``
  into main, timed. No backfill runs at that scale here (it would take hours on 2 cores): the
  report gives (b)'s per-fragment backfill time times the fragments as the estimate, marked so.

Run: ./dev bench branches [--sizes 1000 100000 1000000] [--real-fragments 200]
     [--merge-fragments 100000] [--repeats 5] [--no-spark]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid
from typing import Any

from benchmarks import metadata as meta
from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report, time_interleaved

GROUPS, COLUMNS = 3, 6  # synthetic tables: base, g1 and the feature's group
PLAN_UP_TO = 100_000  # tables planned on a branch and on main (a full plan of 1 M takes ~40 s)


def _synthetic(name: str, fragments: int) -> tuple[Any, Any, Any, meta.Layout, meta.Size]:
    """A warehouse with table ``meta`` of ``fragments`` synthetic fragments on main."""
    import omnitable

    path = BENCH_DIR / f"branches-{name}-{uuid.uuid4().hex[:6]}"
    wh = omnitable.connect(str(path))
    size = meta.Size(fragments, GROUPS, COLUMNS, 20)
    _, layout = meta.create_table(wh, size)
    head = layout.base_version + size.batches
    meta.bulk_insert(wh.catalog.store, meta.synthetic_rows(size, layout), layout.table_id, head)
    return path, wh, wh.table("meta"), layout, size


def _refs_and_rows(wh: Any) -> int:
    from sqlalchemy import text

    with wh.catalog.store.read() as conn:
        return sum(
            int(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one())
            for t in ("refs", "commits", "files", "fragments", "batches", "columns", "removals")
        )


def creation(sizes: list[int], repeats: int) -> list[tuple[str, str, str]]:
    """(a): median branch creation time per table size."""
    rows, first = [], None
    for n in sizes:
        start = time.perf_counter()
        path, wh, t, layout, _ = _synthetic(f"create{n}", n)
        load = time.perf_counter() - start
        try:
            before = _refs_and_rows(wh)
            samples = []
            for i in range(repeats):
                began = time.perf_counter()
                t.create_branch(f"exp{i}")
                samples.append(time.perf_counter() - began)
            written = _refs_and_rows(wh) - before
            med = statistics.median(samples)
            first = first or med
            rows.append((f"(a) create_branch, {n:,} fragments (loaded in {load:.0f} s)",
                         fmt_seconds(med), "<= 50 ms"))  # fmt: skip
            rows.append((f"    catalog rows written per branch, {n:,} fragments",
                         f"{written / repeats:g}", "1"))  # fmt: skip
            rows.append((f"    vs the {sizes[0]:,}-fragment table", fmt_ratio(med / first),
                         "independent of size"))  # fmt: skip
            if n <= PLAN_UP_TO:
                rows += _plans(t, t.branch("exp0"), layout, n)
        finally:
            wh.close()
            shutil.rmtree(path, ignore_errors=True)
    return rows


def _plans(main: Any, branch: Any, layout: meta.Layout, n: int) -> list[tuple[str, str, str]]:
    """A full-scan plan of 4 columns on a branch (its snapshot SQL also checks ``removals``)
    against the same plan on main, interleaved medians."""
    cols = meta.four_columns(layout)
    times = time_interleaved(
        {"main": lambda: main.plan(cols), "branch": lambda: branch.plan(cols)}, repeats=3
    )
    return [(f"    full-scan plan on a branch / on main, {n:,} fragments",
             fmt_ratio(times["branch"] / times["main"]),
             f"{fmt_seconds(times['branch'])} vs {fmt_seconds(times['main'])}")]  # fmt: skip


def _replace_group(
    wh: Any, t: Any, layout: meta.Layout, size: meta.Size, group: str, branch: str
) -> None:
    """One commit on ``branch`` giving every fragment a new file of ``group`` (catalog only)."""
    from omnitable.catalog.commit import CommitRequest
    from omnitable.vocabulary.descriptors import FileDescriptor
    from omnitable.vocabulary.stats import ColumnStats

    cols = layout.by_group[group]
    tag = uuid.uuid4().hex[:8]
    is_feature = group == meta.FEATURE
    files = [
        FileDescriptor(
            f"fi{i:09d}{group}{tag}",
            f"fr{i:09d}",
            group,
            f"f/fr{i:09d}/{group}-{tag}.parquet",
            meta.ROWS_PER_FRAGMENT,
            4096,
            {n: ColumnStats(0, "0", "1") for _, n in cols},
            {n: "1" for _, n in cols} if is_feature else {},
        )
        for i in range(size.fragments)
    ]
    bound = t.branch(branch)
    req = CommitRequest("backfill" if is_feature else "update", bound.version, new_files=files)
    bound._ctx.commit(req)


def synthetic_merge(fragments: int) -> tuple[list[tuple[str, str, str]], float]:
    """(c): merging two branches that each rewrote one column group of every fragment."""
    path, wh, t, layout, size = _synthetic("merge", fragments)
    try:
        t.create_branch("a")
        t.create_branch("b")
        _replace_group(wh, t, layout, size, meta.FEATURE, "a")
        _replace_group(wh, t, layout, size, "g1", "b")
        start = time.perf_counter()
        ff = t.merge("a")
        t_ff = time.perf_counter() - start
        start = time.perf_counter()
        three = t.merge("b")
        t_merge = time.perf_counter() - start
        assert ff.fast_forward and not three.fast_forward
        assert three.cells == fragments * len(layout.by_group["g1"]), three
        rows = [
            (f"(c) merge a (fast-forward), {fragments:,} fragments", fmt_seconds(t_ff), ""),
            (f"(c) merge b (three-way, {three.cells:,} cells adopted)", fmt_seconds(t_merge), ""),
        ]
        return rows, t_ff + t_merge
    finally:
        wh.close()
        shutil.rmtree(path, ignore_errors=True)


def real_merge(fragments: int) -> tuple[list[tuple[str, str, str]], float]:
    """(b): two real backfills on two branches, merged, against re-running one of them."""
    import omnitable
    from benchmarks.backfill_fusion import make_text
    from benchmarks.fusion_features import f_len, f_words

    work = BENCH_DIR / "branches-real"
    shutil.rmtree(work, ignore_errors=True)
    wh = omnitable.connect(str(work / "wh"))
    try:
        t = wh.create_table("docs", {"text": "string"})
        t.append(make_text(fragments * 100), "b0", target_fragment_rows=100)
        t.register(f_len, f_words)
        spark = omnitable.spark_session(
            wh, master="local[2]", **{"spark.ui.enabled": "false",
                                      "spark.ui.showConsoleProgress": "false",
                                      "spark.driver.memory": "4g"})  # fmt: skip
        spark.sparkContext.setLogLevel("ERROR")
        t.create_branch("a")
        t.create_branch("b")
        t.backfill(["f_len"]).run(spark, branch="a")  # also warms Spark and the workers
        start = time.perf_counter()
        t.backfill(["f_words"]).run(spark, branch="b")
        t_backfill = time.perf_counter() - start
        expected = t.branch("b").read(["f_words"])
        start = time.perf_counter()
        t.merge("a")
        t.merge("b")
        t_merge = time.perf_counter() - start
        assert t.read(["f_words"]).equals(expected)
        assert "nothing to do" in t.backfill(["f_len", "f_words"]).explain()
        ratio = t_backfill / t_merge
        rows = [
            (
                f"(b) backfill of f_words on branch b, {fragments:,} fragments",
                fmt_seconds(t_backfill),
                "",
            ),
            ("(b) merge a (fast-forward) + merge b (three-way)", fmt_seconds(t_merge), ""),
            ("(b) backfill / merge", fmt_ratio(ratio), ">= 100x"),
        ]
        return rows, t_backfill / fragments
    finally:
        wh.close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="./dev bench branches")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    parser.add_argument("--real-fragments", type=int, default=200)
    parser.add_argument("--merge-fragments", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-spark", action="store_true", help="skip (b), which runs Spark")
    args = parser.parse_args(argv)
    out: dict[str, float] = {}
    rows = creation(args.sizes, args.repeats)
    per_fragment = None
    if not args.no_spark:
        real, per_fragment = real_merge(args.real_fragments)
        rows += real
    merged, t_merge = synthetic_merge(args.merge_fragments)
    rows += merged
    out["merge_at_scale_s"] = t_merge
    if per_fragment is not None:
        estimate = per_fragment * args.merge_fragments
        rows.append((f"(c) estimated backfill of {args.merge_fragments:,} fragments ((b)'s rate)",
                     fmt_seconds(estimate), "estimate"))  # fmt: skip
        rows.append(("(c) estimated backfill / merge", fmt_ratio(estimate / t_merge), ">= 100x"))
    report("branches", rows)
    return out
