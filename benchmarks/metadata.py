"""Metadata at scale (issue 19): planning and catalog operations on a table with many files.

A real table is created through the API (columns in G groups, one of them the outputs of a
registered feature), then SYNTHETIC catalog rows are inserted directly (executemany on SQLite,
COPY on PostgreSQL): N fragments in batches of ``--fragments-per-batch``, one file per fragment
and group, one ``files`` row with the statistics of every column it carries (and one column set
per group, shared by its files). No data file exists: every
measure is catalog work only. Measured (median of ``--repeats``):

  * ``Table.version``, ``schema``, ``batches()``, ``history()`` (target <= 50 ms);
  * ``Table.plan`` of a one-batch read of 4 columns (target <= 100 ms) and of a full scan of
    4 columns (target <= 2 s): the snapshot plus the reader's planning, no file opened;
  * the catalog time of a commit: an append of one batch, and a backfill of the feature over
    one batch (target <= 200 ms);
  * the catalog's size per file and per statistic (``files`` and ``column_sets``);
  * Spark's plans of the same two reads in a ``local[2]`` session (target <= 100 ms and
    <= 2 s): ``Table.to_spark(...).select(4 columns)`` and its physical plan (``explain``, which
    plans the scan: catalog reads, pruning, input partitions), after warm-up plans; the ratio to
    the Python plan of the same batch, measured in the same run (``--no-spark`` skips them);
    the full scan's plan made on the driver and on the executors side by side (the default
    settings pick the executors from 100,000 fragments on), and a count of the full scan both
    ways (no file is opened: the driver's plan plus the tasks' listings, up to 300,000
    fragments).

Sizes are ``NxGxC`` (fragments x groups x columns); several sizes give the growth law. The
issue's full size is ``--sizes 300000x50x2500`` (PostgreSQL). PostgreSQL runs when
``OMNITABLE_TEST_POSTGRES_URL`` is set (in a throw-away database), SQLite always.

Run: ./dev bench metadata [--sizes 1000x10x100 4000x10x100] [--backends sqlite postgres] [--no-spark]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
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

ROWS_PER_FRAGMENT = 1000
FEATURE = "feat"
PG_ENV = "OMNITABLE_TEST_POSTGRES_URL"


@dataclass(frozen=True)
class Size:
    fragments: int
    groups: int
    columns: int
    per_batch: int

    @property
    def label(self) -> str:
        return f"{self.fragments}x{self.groups}x{self.columns}"

    @property
    def batches(self) -> int:
        return -(-self.fragments // self.per_batch)


@dataclass
class Layout:
    """The table's columns: ``by_group[g]`` lists the (column_id, name) pairs of group ``g``."""

    table_id: str
    by_group: dict[str, list[tuple[int, str]]]
    base_version: int


def parse_size(text: str, per_batch: int) -> Size:
    n, g, c = (int(x) for x in text.lower().split("x"))
    if g < 3 or c < g:
        raise SystemExit(f"size {text}: need at least 3 groups and one column per group")
    return Size(n, g, c, per_batch)


# -- the table and its synthetic rows ------------------------------------------------------------


def create_table(wh: Any, size: Size, name: str = "meta") -> tuple[Any, Layout]:
    """A real table: raw columns in groups g1..g(G-2) and ``base``, the feature's in ``feat``."""
    from omnitable.catalog.commit import CommitRequest, FeatureRow, NewColumn

    raw_groups = ["base"] + [f"g{i}" for i in range(1, size.groups - 1)]
    raw = [f"c{i:05d}" for i in range(size.columns - size.columns // size.groups)]
    groups = {
        g: [c for i, c in enumerate(raw) if i % len(raw_groups) == k]
        for k, g in enumerate(raw_groups)
    }
    t = wh.create_table(
        name,
        {c: "double" for c in raw},
        groups={g: cs for g, cs in groups.items() if g != "base"},
    )
    outputs = [f"{FEATURE}_{i:05d}" for i in range(size.columns // size.groups)]
    definition = {"inputs": raw[:1], "outputs": {o: "double" for o in outputs}, "kind": "pandas"}
    req = CommitRequest(
        "register",
        t.version,
        new_columns=[NewColumn(o, "double", True, FEATURE, FEATURE) for o in outputs],
        features=[FeatureRow(FEATURE, "1", "pandas", definition, "fp")],
    )
    version = wh.catalog.commit(t.record, req)
    snap = t.snapshot(with_files=False)
    by_group: dict[str, list[tuple[int, str]]] = {}
    for c in snap.columns:
        by_group.setdefault(c.group_name, []).append((c.column_id, c.name))
    return t, Layout(t.record.table_id, by_group, version)


def synthetic_rows(size: Size, layout: Layout) -> dict[str, Iterator[tuple[Any, ...]]]:
    """Rows of commits, batches, fragments, column sets and files: batch ``b`` is committed at
    version ``base + 1 + b``, its fragments carry one file per group (one set per group)."""
    from omnitable.catalog.sets import ColumnSet, encode_stats
    from omnitable.vocabulary.stats import ColumnStats

    t, base = layout.table_id, layout.base_version
    now = "2026-11-30T00:00:00.000000Z"

    def commits() -> Iterator[tuple[Any, ...]]:
        for b in range(size.batches):
            v = base + 1 + b
            yield (t, v, v - 1, "main", "append", None, '{"synthetic": true}', now, None)

    def batches() -> Iterator[tuple[Any, ...]]:
        for b in range(size.batches):
            n = min(size.per_batch, size.fragments - b * size.per_batch)
            yield (t, f"ba{b:08d}", f"batch/{b:08d}", "main", base + 1 + b, None, now,
                   n * ROWS_PER_FRAGMENT, n, base + 1 + b)  # fmt: skip

    def fragments() -> Iterator[tuple[Any, ...]]:
        for i in range(size.fragments):
            b, seq = divmod(i, size.per_batch)
            yield (
                t,
                f"fr{i:09d}",
                f"ba{b:08d}",
                seq,
                ROWS_PER_FRAGMENT,
                f"f/fr{i:09d}",
                "main",
                base + 1 + b,
                None,
                base + 1 + b,
            )

    sets = {
        g: ColumnSet.of({cid: "1" if g == FEATURE else None for cid, _ in cols})
        for g, cols in layout.by_group.items()
    }

    def column_sets() -> Iterator[tuple[Any, ...]]:
        for cs in sets.values():
            for pos, (cid, fv) in enumerate(cs.members):
                yield (t, cs.set_id, cid, pos, fv)

    def stats(i: int, g: str) -> str | None:
        lo = i * ROWS_PER_FRAGMENT
        by_id = {
            cid: ColumnStats(0, str(lo), str(lo + ROWS_PER_FRAGMENT - 1))
            if cid == 0
            else ColumnStats(0, "0", "1")
            for cid, _ in layout.by_group[g]
        }
        return encode_stats(sets[g], by_id)

    shared = {g: stats(0, g) for g in layout.by_group if g != "base"}  # the same for every file

    def files() -> Iterator[tuple[Any, ...]]:
        for i in range(size.fragments):
            v = base + 1 + i // size.per_batch
            for g in layout.by_group:
                yield (
                    t,
                    f"fi{i:09d}{g}",
                    f"fr{i:09d}",
                    g,
                    f"f/fr{i:09d}/{g}.parquet",
                    ROWS_PER_FRAGMENT,
                    4096,
                    "main",
                    v,
                    None,
                    None,
                    sets[g].set_id,
                    shared[g] if g in shared else stats(i, g),
                )

    return {
        "commits": commits(),
        "batches": batches(),
        "fragments": fragments(),
        "column_sets": column_sets(),
        "files": files(),
    }


COLUMNS = {
    "commits": "table_id, version, parent_version, branch, op, run_id, summary, committed_at, "
    "commit_token",
    "batches": "table_id, batch_id, name, branch, added_version, removed_version, created_at, "
    "row_count, fragment_count, position",
    "fragments": "table_id, fragment_id, batch_id, seq, row_count, path, branch, added_version, "
    "removed_version, position",
    "column_sets": "table_id, set_id, column_id, position, feature_version",
    "files": "table_id, file_id, fragment_id, group_name, path, row_count, size_bytes, branch, "
    "added_version, removed_version, run_id, set_id, stats",
}


def bulk_insert(
    store: Any, rows: dict[str, Iterator[tuple[Any, ...]]], table_id: str, head: int
) -> None:
    """Insert ``rows`` in one transaction (COPY on PostgreSQL), then move the table's ``main``
    to ``head`` and analyze (on PostgreSQL also vacuum) the catalog."""
    raw = store.engine.raw_connection()
    try:
        conn = raw.driver_connection
        cur = conn.cursor()
        if store.is_sqlite:
            cur.execute("PRAGMA synchronous=OFF")
            cur.execute("BEGIN IMMEDIATE")
            for table, it in rows.items():
                marks = ", ".join("?" * len(COLUMNS[table].split(",")))
                cur.executemany(f"INSERT INTO {table} ({COLUMNS[table]}) VALUES ({marks})", it)
        else:
            for table, it in rows.items():
                with cur.copy(f"COPY {table} ({COLUMNS[table]}) FROM STDIN") as copy:
                    for row in it:
                        copy.write_row(row)
        where = f"WHERE table_id = '{table_id}'"  # a generated hex id
        cur.execute(f"UPDATE refs SET version = {head} {where} AND name = 'main'")
        cur.execute(f"UPDATE tables SET next_row_id = {10**12} {where}")  # past synthetic ids
        if store.is_sqlite:
            cur.execute("COMMIT")
            cur.execute("ANALYZE")
        else:
            conn.commit()
            # Measure the catalog at rest: after a bulk load PostgreSQL's autovacuum would
            # otherwise scan the new rows (gigabytes at the full size) during the measures.
            conn.autocommit = True
            cur.execute("VACUUM (ANALYZE)")
    finally:
        raw.close()


# -- measures ------------------------------------------------------------------------------------


def append_request(t: Any, layout: Layout, size: Size, n: int) -> Any:
    """An append of one batch (``per_batch`` fragments, files of every raw group)."""
    from omnitable.catalog.commit import CommitRequest
    from omnitable.vocabulary.descriptors import FileDescriptor, FragmentDescriptor
    from omnitable.vocabulary.stats import ColumnStats

    bid = f"new{n}{uuid.uuid4().hex[:8]}"
    frags = []
    for seq in range(size.per_batch):
        fid = f"{bid}-{seq}"
        files = [
            FileDescriptor(
                f"{fid}{g}",
                fid,
                g,
                f"n/{fid}/{g}.parquet",
                ROWS_PER_FRAGMENT,
                4096,
                {name: ColumnStats(0, "0", "1") for _, name in cols},
            )
            for g, cols in layout.by_group.items()
            if g != FEATURE
        ]
        frags.append(FragmentDescriptor(fid, bid, ROWS_PER_FRAGMENT, f"n/{fid}", files, seq))
    return CommitRequest(
        "append", t.version, new_batches=[(bid, f"new/{bid}")], new_fragments=frags
    )


def backfill_request(t: Any, layout: Layout, size: Size, batch: int) -> Any:
    """A backfill of the feature over one batch: new ``feat`` files replace the old ones."""
    from omnitable.catalog.commit import CommitRequest, LineageEntry
    from omnitable.catalog.snapshot import SnapshotScope
    from omnitable.vocabulary.descriptors import FileDescriptor
    from omnitable.vocabulary.stats import ColumnStats

    cols = layout.by_group[FEATURE]
    frag_ids = [
        f"fr{i:09d}"
        for i in range(batch * size.per_batch, (batch + 1) * size.per_batch)
        if i < size.fragments
    ]
    tag = uuid.uuid4().hex[:8]
    files = [
        FileDescriptor(
            f"{fid}{FEATURE}{tag}",
            fid,
            FEATURE,
            f"f/{fid}/{tag}.parquet",
            ROWS_PER_FRAGMENT,
            4096,
            {n: ColumnStats(0, "0", "1") for _, n in cols},
            {n: "1" for _, n in cols},
        )
        for fid in frag_ids
    ]
    scope = SnapshotScope.of([f"batch/{batch:08d}"], [n for _, n in cols])
    snap = t.snapshot(scope=scope)
    removed = [f.file_id for fid in frag_ids for f in snap.files_by_fragment.get(fid, [])]
    lineage = [
        LineageEntry(f.file_id, n, FEATURE, "1", [], "python") for f in files for _, n in cols
    ]
    return CommitRequest(
        "backfill",
        snap.version,
        new_files=files,
        removed_files=removed,
        lineage=lineage,
        feature_versions={FEATURE: "1"},
    )


def timed_commits(wh: Any, t: Any, make: Callable[[int], Any], repeats: int) -> float:
    """Median time of ``Catalog.commit`` alone (the request is built beforehand)."""
    samples = []
    for n in range(repeats):
        req = make(n)
        start = time.perf_counter()
        wh.catalog.commit(t.record, req)
        samples.append(time.perf_counter() - start)
    return sorted(samples)[len(samples) // 2]


def catalog_sizes(store: Any) -> dict[str, int]:
    """Bytes of ``files`` and ``column_sets`` with their indexes."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    with store.engine.connect() as conn:
        if not store.is_sqlite:
            return {
                t: int(conn.execute(text(f"SELECT pg_total_relation_size('{t}')")).scalar() or 0)
                for t in ("files", "column_sets")
            }
        try:
            rows = conn.execute(
                text(
                    "SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat d JOIN sqlite_master m "
                    "ON m.name = d.name GROUP BY m.tbl_name"
                )
            ).all()
            return {str(r[0]): int(r[1]) for r in rows if r[0] in ("files", "column_sets")}
        except OperationalError:  # dbstat not compiled in: the whole file, split by row counts
            path = store.address.sqlite_dir
            total = sum(p.stat().st_size for p in path.glob("catalog.db*"))
            return {"files": total, "column_sets": 0}


def middle_batch(size: Size) -> str:
    """The batch every one-batch plan reads: the middle one."""
    return f"batch/{size.batches // 2:08d}"


def four_columns(layout: Layout) -> list[str]:
    """The columns every plan reads: 2 of each of 2 raw groups."""
    return [n for g in list(layout.by_group)[1:3] for _, n in layout.by_group[g][:2]]


def measure(wh: Any, t: Any, layout: Layout, size: Size, repeats: int) -> dict[str, float]:
    from omnitable.format.reader import FragmentReader

    four = four_columns(layout)
    mid = middle_batch(size)
    one = t.plan(four, batches=[mid])
    assert len(one.fragments) == min(size.per_batch, size.fragments), one.fragments_total
    assert one.files == 2 * len(one.fragments), one.files
    full = t.plan(four)
    assert len(full.fragments) == size.fragments
    times = time_interleaved(
        {
            "version": lambda: t.version,
            "schema": lambda: t.schema,
            "batches()": lambda: t.batches(),
            "history()": lambda: t.history(),
            "plan one batch, 4 columns": lambda: t.plan(four, batches=[mid]),
            "plan full scan, 4 columns": lambda: t.plan(four),
            **(
                {BASELINE: lambda: FragmentReader(t.location, t.snapshot()).plan(four, None, [mid])}
                if size.fragments * size.groups <= BASELINE_MAX_FILES
                else {}
            ),
        },
        repeats=repeats,
        warmup=0,
    )
    times["commit: append one batch"] = timed_commits(
        wh, t, lambda n: append_request(t, layout, size, n), repeats
    )
    times["commit: backfill one batch"] = timed_commits(
        wh, t, lambda n: backfill_request(t, layout, size, n % size.batches), repeats
    )
    return times


SPARK_ONE = "Spark: plan one batch, 4 columns"
SPARK_FULL = "Spark: plan full scan, 4 columns"
SPARK_FULL_ON = {
    "driver": "Spark: plan full scan on the driver",
    "executors": "Spark: plan full scan on the executors",
}
SPARK_COUNT_ON = {
    "driver": "Spark: count a full scan planned on the driver",
    "executors": "Spark: count a full scan planned on the executors",
}
SPARK_DEFAULT_ON = "Spark: the default full-scan plan ran on the"
MIN_FRAGMENTS = "spark.omnitable.read.executor_planning_min_fragments"
PLANNED_ON = {"driver": str(2**62), "executors": "0"}
"""The setting that makes a plan run on the driver or on the executors at any size (a full
scan of at least 100,000 fragments is planned on the executors by default)."""

COUNT_MAX_FRAGMENTS = 300_000
"""Full-scan counts run up to this many fragments (1,000 rows each): the job reads no file (a
count selects no column), so it times the driver's plan plus the tasks' listings."""
SPARK_WARMUP = 30
"""Untimed Spark plans first: the JVM compiles the planner's (and Spark's analyzer's) code during
its first plans; after 10 a one-batch plan still took 75 ms, after 30 about 45 ms (a probe at
the issue's size)."""

SPARK_ONE_REPEATS = 15
"""One-batch Spark plans timed (the median is reported): on their own, not interleaved with the
full-scan plans, whose hundreds of MB of garbage the JVM collects during the next plan."""


def measure_spark(wh: Any, t: Any, layout: Layout, size: Size, repeats: int) -> dict[str, float]:
    """Spark's plans of the reads :func:`measure` times, in a ``local[2]`` session: the DataFrame
    of 4 columns and its physical plan (``explain`` plans the scan, as any action would first)."""
    import omnitable

    four = four_columns(layout)
    mid = middle_batch(size)
    spark = omnitable.spark_session(
        wh,
        master="local[2]",
        **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )

    def plan(batches: list[str] | None) -> str:
        df = t.to_spark(spark, batches=batches).select(*four)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            df.explain()
        return out.getvalue()

    try:
        text = plan([mid])
        kept = min(size.per_batch, size.fragments)
        assert f"fragments={kept}/" in text, text
        for _ in range(0 if smoke() else SPARK_WARMUP):
            plan([mid])
        one = time_interleaved({SPARK_ONE: lambda: plan([mid])}, SPARK_ONE_REPEATS, warmup=0)
        on_executors = "listed and pruned by the executors" in plan(None)
        full = {SPARK_FULL: lambda: plan(None)}
        full.update(
            {SPARK_FULL_ON[w]: planned_on(spark, w, lambda: plan(None)) for w in PLANNED_ON}
        )
        times = {**one, **time_interleaved(full, repeats, warmup=0)}
        times[SPARK_DEFAULT_ON] = float(on_executors)
        if size.fragments <= COUNT_MAX_FRAGMENTS:
            counts: dict[str, set[int]] = {w: set() for w in PLANNED_ON}

            def count(where: str) -> Callable[[], Any]:
                job = planned_on(spark, where, lambda: t.to_spark(spark).count())
                return lambda: counts[where].add(job())

            jobs = {key: count(where) for where, key in SPARK_COUNT_ON.items()}
            times.update(time_interleaved(jobs, repeats, warmup=1))
            # the synthetic fragments' rows and the real batches', the same both ways
            assert len(counts["driver"] | counts["executors"]) == 1, counts
            assert counts["driver"].pop() >= size.fragments * ROWS_PER_FRAGMENT, counts
        return times
    finally:
        spark.stop()


def planned_on(spark: Any, where: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with Spark's full-scan plans made on the driver or on the executors."""

    def run() -> Any:
        spark.conf.set(MIN_FRAGMENTS, PLANNED_ON[where])
        try:
            return fn()
        finally:
            spark.conf.unset(MIN_FRAGMENTS)

    return run


BASELINE = "baseline: plan one batch from the whole snapshot"
"""What every plan did before snapshots were scoped (load every file and statistic), measured
side by side in the same run."""

BASELINE_MAX_FILES = 2_000_000
"""Above this many files the baseline is not run: the whole snapshot needs about 1 KB of driver
memory per file (15 GB at the issue's 15 M files, more than this machine has)."""

TARGETS = {
    "version": 0.05,
    "schema": 0.05,
    "batches()": 0.05,
    "history()": 0.05,
    "plan one batch, 4 columns": 0.1,
    "plan full scan, 4 columns": 2.0,
    "commit: append one batch": 0.2,
    "commit: backfill one batch": 0.2,
    SPARK_ONE: 0.1,
    SPARK_FULL: 2.0,
}


def peak_memory(fn: Callable[[], Any]) -> int:
    """Peak Python memory allocated while ``fn`` runs (tracemalloc; the result is dropped)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run_one(backend: str, size: Size, repeats: int, spark: bool = True) -> dict[str, float]:
    import omnitable

    address, cleanup = _warehouse(backend, size)
    try:
        wh = omnitable.connect(address, **({} if backend == "sqlite" else {"root": str(BENCH_DIR)}))
        t, layout = create_table(wh, size)
        start = time.perf_counter()
        head = layout.base_version + size.batches
        bulk_insert(wh.catalog.store, synthetic_rows(size, layout), layout.table_id, head)
        load = time.perf_counter() - start
        t = wh.table("meta")
        times = measure(wh, t, layout, size, repeats)
        if spark:
            times.update(measure_spark(wh, t, layout, size, repeats))
        memory = peak_memory(lambda: t.plan(four_columns(layout)))
        sizes = catalog_sizes(wh.catalog.store)
        _report(backend, size, times, sizes, load, memory)
        wh.close()
        return times
    finally:
        cleanup()


def _report(
    backend: str,
    size: Size,
    times: dict[str, float],
    sizes: dict[str, int],
    load: float,
    memory: int,
) -> None:
    n_files = size.fragments * size.groups
    n_stats = size.fragments * (size.columns + 1)
    rows = [
        (k, fmt_seconds(v), f"target <= {fmt_seconds(TARGETS[k])}")
        for k, v in times.items()
        if k in TARGETS
    ]
    one, base = times["plan one batch, 4 columns"], times.get(BASELINE)
    if base is None:
        rows.append((BASELINE, "not run", f"{n_files} files > {BASELINE_MAX_FILES}"))
    else:
        ratio = f"this / the scoped plan: {fmt_ratio(base / one)}"
        rows.append((BASELINE, fmt_seconds(base), ratio))
    if SPARK_ONE in times:
        ratio = f"Spark / the Python plan: {fmt_ratio(times[SPARK_ONE] / one)}"
        rows.append(("Spark: one batch against Python", fmt_seconds(times[SPARK_ONE]), ratio))
    rows += list(_spark_rows(times))
    total = sizes.get("files", 0) + sizes.get("column_sets", 0)
    read = 2 * size.fragments  # the full scan's files: 2 groups of every fragment
    rows += [
        (
            "plan full scan: peak driver memory",
            fmt_bytes(memory),
            f"{fmt_bytes(memory / read)} per file read ({read} files)",
        ),
        ("catalog bytes per file", fmt_bytes(total / n_files), "(files + column_sets, indexes)"),
        ("catalog bytes per statistic", fmt_bytes(total / n_stats), "(the same over statistics)"),
        ("synthetic load", fmt_seconds(load), f"{n_files} files, {n_stats} statistics"),
    ]
    report(f"metadata, {backend}, {size.label} ({size.batches} batches)", rows)


def _spark_rows(times: dict[str, float]) -> Iterator[tuple[str, str, str]]:
    """The full scan planned on the executors against the same plan on the driver (side by side
    in the same run), and which of the two the default settings chose."""
    for measures in (SPARK_FULL_ON, SPARK_COUNT_ON):
        driver, executors = times.get(measures["driver"]), times.get(measures["executors"])
        if driver is None or executors is None:
            continue
        yield measures["driver"], fmt_seconds(driver), ""
        ratio = f"the driver's / this: {fmt_ratio(driver / executors)}"
        yield measures["executors"], fmt_seconds(executors), ratio
    if SPARK_FULL in times:
        where = "executors" if times.get(SPARK_DEFAULT_ON) else "driver"
        yield SPARK_DEFAULT_ON, where, f"({MIN_FRAGMENTS} at its default)"


def _warehouse(backend: str, size: Size) -> tuple[str, Callable[[], None]]:
    if backend == "sqlite":
        path = BENCH_DIR / f"metadata-{size.label}-{uuid.uuid4().hex[:6]}"
        return str(path), lambda: shutil.rmtree(path, ignore_errors=True)
    import psycopg

    from omnitable.catalog.address import parse_address

    base = parse_address(os.environ[PG_ENV])
    name = f"omt_bench_{uuid.uuid4().hex[:10]}"

    def admin(sql: str) -> None:
        with psycopg.connect(**base.connect_params(), autocommit=True) as conn:
            conn.execute(sql)

    admin(f'CREATE DATABASE "{name}"')
    address = base.url.set(database=name).render_as_string(hide_password=False)
    return address, lambda: admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def growth(results: dict[str, dict[str, float]], sizes: list[Size]) -> Iterable[tuple[str, ...]]:
    """Per measure, the exponent k of time ~ files^k between the smallest and largest size."""
    import math

    if len(sizes) < 2:
        return []
    a, b = sizes[0], sizes[-1]
    fa, fb = a.fragments * a.columns, b.fragments * b.columns
    out = []
    for k in [k for k in results[a.label] if k in results[b.label] and k != SPARK_DEFAULT_ON]:
        ta, tb = results[a.label][k], results[b.label][k]
        exp = math.log(max(tb, 1e-6) / max(ta, 1e-6)) / math.log(fb / fa) if fb != fa else 0.0
        out.append((k, f"k = {exp:.2f}", f"{fmt_seconds(ta)} -> {fmt_seconds(tb)}"))
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="metadata")
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=["1000x10x100", "4000x10x100"],
        help="NxGxC: fragments x groups x columns (issue: 300000x50x2500)",
    )
    parser.add_argument("--fragments-per-batch", type=int, default=20)
    parser.add_argument("--backends", nargs="+", default=None, choices=["sqlite", "postgres"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--no-spark", dest="spark", action="store_false", help="skip the Spark plans"
    )
    args = parser.parse_args(argv)
    backends = args.backends or ["sqlite"] + (["postgres"] if os.environ.get(PG_ENV) else [])
    sizes = [parse_size(s, args.fragments_per_batch) for s in args.sizes]
    out: dict[str, float] = {}
    for backend in backends:
        results = {s.label: run_one(backend, s, args.repeats, args.spark) for s in sizes}
        law = list(growth(results, sizes))
        if law:
            report(f"growth law, {backend}: time ~ (fragments x columns)^k", law)
        out.update({f"{backend}/{s}/{k}": v for s, r in results.items() for k, v in r.items()})
    return out
