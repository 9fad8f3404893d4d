"""Keyed-table parts of the data operations benchmark (issue 12), run by ``./dev bench dataops``.

Data: a crawl-like training table keyed by ``url`` (``https://s<site>.example.org/p/<12 digits>``,
37-40 bytes), three numeric columns (``score`` float64, ``tokens`` int32, ``label`` int16) and a
``title`` of 100-200 random letters (stored in a column group of its own, as a text payload is).

* (b) upsert ``--upsert-rows`` rows (half existing keys, half new; every column new values) into a
  table of ``--upsert-base`` rows: ``Table.upsert`` (last_write_wins) vs Delta Lake's
  ``MERGE INTO ... WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *`` on the same
  data; time, rows inserted/merged and bytes written by each side; both sides checked (row
  counts, a sample of merged and inserted keys holds the new values).
* (c) point lookup of 1,000 random existing keys of that table after the upsert (its index spans
  both batches): ``Table.lookup`` vs the filtered scan ``Table.read(where=url.isin(keys))``, warm
  (interleaved medians) and cold (the in-process index cache emptied before each lookup); both
  return the same rows. Then 100 and 1 of those keys, warm: the data pages a lookup reads (512
  rows each in keyed tables) follow the keys. Last, the 1,000 keys with ``verify_keys=True``
  (the stored keys read back and compared: the key column's pages decoded too), for its cost.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from benchmarks.common import fmt_bytes, fmt_ratio, fmt_seconds, rounds, time_interleaved

Rows = list[tuple[str, str, str]]
KEY = "url"
LOOKUP_KEYS = 1_000
LOOKUP_COLUMNS = [KEY, "score", "label"]
SAMPLE = 200  # merged and inserted keys checked on both sides


def tree_size(path: str | Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    fs = pafs.LocalFileSystem()
    infos = fs.get_file_info(pafs.FileSelector(str(path), recursive=True, allow_not_found=True))
    return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)


def urls(ids: np.ndarray) -> pa.Array:
    """The URL key of each id (distinct ids give distinct URLs)."""
    ids_arr = pa.array(ids.astype(np.int64))
    site = pc.cast(pc.bit_wise_and(ids_arr, 1023), pa.string())
    path = pc.utf8_lpad(pc.cast(ids_arr, pa.string()), 12, "0")
    return pc.binary_join_element_wise("https://s", site, ".example.org/p/", path, "")


def keyed_data(ids: np.ndarray, seed: int) -> pa.Table:
    """Rows of the keyed table for ``ids`` with values drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    lengths = rng.integers(100, 201, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    letters = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    title = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(letters))
    return pa.table(
        {
            KEY: urls(ids),
            "score": rng.random(n),
            "tokens": rng.integers(0, 4096, n, dtype=np.int32),
            "label": rng.integers(0, 1000, n, dtype=np.int16),
            "title": title,
        }
    )


def changes_for(base_rows: int, rows: int, seed: int = 11) -> tuple[pa.Table, np.ndarray]:
    """An upsert of ``rows`` rows: half of them existing ids (random), half new, shuffled;
    returns the rows and the existing ids they hold."""
    rng = np.random.default_rng(seed)
    existing = rng.choice(base_rows, rows // 2, replace=False)
    new = np.arange(base_rows, base_rows + rows - len(existing))
    ids = np.concatenate([existing, new])
    rng.shuffle(ids)
    return keyed_data(ids, seed + 1), existing


def _sample_keys(changes: pa.Table, base_rows: int, seed: int = 13) -> pa.Array:
    """Up to SAMPLE merged and SAMPLE inserted keys of ``changes``."""
    ids = pc.cast(pc.utf8_slice_codeunits(changes.column(KEY), -12), pa.int64()).to_numpy()
    rng = np.random.default_rng(seed)
    merged = np.flatnonzero(ids < base_rows)
    inserted = np.flatnonzero(ids >= base_rows)
    picked = [rng.choice(p, min(SAMPLE, len(p)), replace=False) for p in (merged, inserted)]
    return changes.column(KEY).take(pa.array(np.sort(np.concatenate(picked))))


def _expected(changes: pa.Table, keys: pa.Array, columns: list[str]) -> list[dict[str, Any]]:
    rows = changes.filter(pc.is_in(changes.column(KEY), keys)).select(columns)
    return sorted(rows.to_pylist(), key=lambda r: r[KEY])


def upsert_part(
    wh: Any, spark: Callable[[], Any | None], base_rows: int, rows: int, work: Path
) -> tuple[Rows, dict[str, float], Any]:
    """(b): the upsert, timed and checked on both sides (Delta's when ``spark()`` gives a
    session); returns report rows, figures and the OmniTable table after it (for (c))."""
    start = time.perf_counter()
    base = keyed_data(np.arange(base_rows), 7)
    t = wh.create_table("keyed", base.schema, groups={"payload": ["title"]}, key=KEY)
    t.upsert(base, append_name="base")
    changes, existing = changes_for(base_rows, rows)
    print(f"  (b) OmniTable base table of {base_rows:,} rows: {time.perf_counter() - start:.0f} s")
    location = work / "wh"
    size = tree_size(location)
    start = time.perf_counter()
    result = t.upsert(changes, append_name="changes")
    omni_s = time.perf_counter() - start
    omni_bytes = tree_size(location) - size
    expected_rows = base_rows + rows - len(existing)
    assert (result.inserted, result.merged, result.rejected.num_rows) == (
        rows - len(existing), len(existing), 0,
    ), result  # fmt: skip
    assert t.count() == expected_rows, (t.count(), expected_rows)
    sample = _sample_keys(changes, base_rows)
    cols = changes.column_names
    got = sorted(t.lookup(sample, cols).to_pylist(), key=lambda r: r[KEY])
    assert got == _expected(changes, sample, cols), "OmniTable rows differ from the upsert"
    out = {"omni_s": omni_s, "omni_bytes": float(omni_bytes), "inserted": float(result.inserted),
           "merged": float(result.merged)}  # fmt: skip
    report: Rows = [
        (f"(b) upsert {rows:,} rows into {base_rows:,}: OmniTable", fmt_seconds(omni_s), ""),
        ("(b) rows inserted / merged", f"{result.inserted:,} / {result.merged:,}", ""),
        ("(b) bytes written: OmniTable", fmt_bytes(omni_bytes), ""),
    ]
    session = spark()
    if session is not None:
        delta = _delta_merge(session, base, changes, sample, expected_rows, work)
        out.update({f"delta_{k}": v for k, v in delta.items()})
        report += [
            ("(b) Delta MERGE", fmt_seconds(delta["s"]), ""),
            ("(b) MERGE / upsert time", fmt_ratio(delta["s"] / omni_s), "target >= 2x"),
            ("(b) rows inserted / updated: Delta", f"{delta['inserted']:,.0f} / {delta['updated']:,.0f}", ""),
            ("(b) bytes written: Delta MERGE", fmt_bytes(delta["bytes"]), ""),
            ("(b) Delta / OmniTable bytes", fmt_ratio(delta["bytes"] / omni_bytes), ""),
        ]  # fmt: skip
    return report, out, t


def _delta_merge(
    spark: Any, base: pa.Table, changes: pa.Table, sample: pa.Array, expected_rows: int,
    work: Path,
) -> dict[str, float]:  # fmt: skip
    """Delta's MERGE of ``changes`` into a Delta table written from ``base``."""
    import pyarrow.parquet as pq

    path = str(work / "delta_keyed")
    pq.write_table(base, str(work / "keyed_base.parquet"))
    spark.read.parquet(str(work / "keyed_base.parquet")).write.format("delta").save(path)
    pq.write_table(changes, str(work / "keyed_changes.parquet"))
    spark.read.parquet(str(work / "keyed_changes.parquet")).createOrReplaceTempView("upserts")
    size = tree_size(path)
    start = time.perf_counter()
    metrics = spark.sql(
        f"MERGE INTO delta.`{path}` t USING upserts s ON t.{KEY} = s.{KEY} "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    ).collect()[0]
    seconds = time.perf_counter() - start
    written = tree_size(path) - size
    table = spark.read.format("delta").load(path)
    assert table.count() == expected_rows, (table.count(), expected_rows)
    keys = spark.createDataFrame([(k,) for k in sample.to_pylist()], [KEY])
    got = sorted(
        (r.asDict() for r in table.join(keys, KEY).select(*changes.column_names).collect()),
        key=lambda r: r[KEY],
    )
    assert got == _expected(changes, sample, changes.column_names), "Delta rows differ"
    return {
        "s": seconds,
        "bytes": float(written),
        "inserted": float(metrics["num_inserted_rows"]),
        "updated": float(metrics["num_updated_rows"]),
    }


def lookup_part(t: Any, repeats: int, seed: int = 17) -> tuple[Rows, dict[str, float]]:
    """(c): 1,000 random live keys, ``Table.lookup`` vs the filtered scan, warm and cold; then
    100 and 1 of those keys, warm (where the index pays: the row groups read follow the keys)."""
    from omnitable.format import keyindex

    live = t.read([KEY]).column(KEY)
    rng = np.random.default_rng(seed)
    keys = live.take(pa.array(rng.choice(len(live), LOOKUP_KEYS, replace=False))).combine_chunks()
    cold = []
    for _ in range(rounds(3)):
        keyindex._CACHE.clear()
        start = time.perf_counter()
        found = t.lookup(keys, LOOKUP_COLUMNS)
        cold.append(time.perf_counter() - start)
    scanned = t.read(LOOKUP_COLUMNS, where=pc.field(KEY).isin(keys))
    verified = t.lookup(keys, LOOKUP_COLUMNS, verify_keys=True)
    assert found.num_rows == scanned.num_rows == LOOKUP_KEYS, (found.num_rows, scanned.num_rows)
    assert found.sort_by(KEY).equals(scanned.sort_by(KEY)), "lookup and scan rows differ"
    assert verified.equals(found), "a lookup reading the keys back differs"
    report: Rows = [(f"(c) lookup of {LOOKUP_KEYS:,} keys, cold (index cache emptied)",
                     fmt_seconds(statistics.median(cold)), "")]  # fmt: skip
    out = {"lookup_cold_s": statistics.median(cold)}
    for n in (LOOKUP_KEYS, 100, 1):
        some = keys.slice(0, n)
        times = time_interleaved(
            {"lookup": lambda some=some: t.lookup(some, LOOKUP_COLUMNS),
             "scan": lambda some=some: t.read(LOOKUP_COLUMNS, where=pc.field(KEY).isin(some))},
            repeats=repeats if n == LOOKUP_KEYS else 3,
        )  # fmt: skip
        ratio = times["scan"] / times["lookup"]
        out.update({f"lookup_{n}_s": times["lookup"], f"scan_{n}_s": times["scan"],
                    f"lookup_{n}_ratio": ratio})  # fmt: skip
        report += [
            (f"(c) lookup of {n:,} keys, warm", fmt_seconds(times["lookup"]), ""),
            (f"(c) filtered scan, url isin {n:,} keys", fmt_seconds(times["scan"]), ""),
            (f"(c) scan / lookup, {n:,} keys", fmt_ratio(ratio),
             "target >= 50x" if n == LOOKUP_KEYS else ""),
        ]  # fmt: skip
    cold_ratio = out[f"scan_{LOOKUP_KEYS}_s"] / out["lookup_cold_s"]
    report.insert(
        3, ("(c) scan / lookup, cold", fmt_ratio(cold_ratio), "first lookup: loads the indexes")
    )
    out["lookup_cold_ratio"] = cold_ratio
    some = keys.slice(0, LOOKUP_KEYS)
    times = time_interleaved(
        {"verified": lambda: t.lookup(some, LOOKUP_COLUMNS, verify_keys=True),
         "lookup": lambda: t.lookup(some, LOOKUP_COLUMNS)},
        repeats=3,
    )  # fmt: skip
    out["lookup_verified_s"] = times["verified"]
    out["lookup_verified_ratio"] = out[f"scan_{LOOKUP_KEYS}_s"] / times["verified"]
    report += [
        (f"(c) lookup of {LOOKUP_KEYS:,} keys reading the keys back (verify_keys)",
         fmt_seconds(times["verified"]), f"{fmt_ratio(times['verified'] / times['lookup'])} "
         "the lookup"),
        ("(c) scan / lookup with verify_keys", fmt_ratio(out["lookup_verified_ratio"]), ""),
    ]  # fmt: skip
    return report, out
