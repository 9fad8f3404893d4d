"""Issue 18: OmniTable's Python data plane side by side with its peers.

Data: N rows (default 2,000,000: two fragments) of an id, 3 floats (x, y, z), a short string
and a ~250-byte text column; and a wide table of ``--wide-rows`` rows and 200 float columns in
50 groups. Each is written, extended and read by OmniTable's Python API, plain pyarrow Parquet
(zstd at OmniTable's level), Lance (pylance) and Delta (deltalake, zstd at the same level),
measured interleaved in one run:

  * ingest (append / write);
  * add one column keyed by id (time and bytes written);
  * read 2 float columns (wide table: 4 columns from 4 groups);
  * read the text column where x < 0.01, ~1 % random rows (wide table: 4 columns where
    f0 < 0.01).

Each row prints OmniTable / Parquet and OmniTable / Lance with the issue's goal. The peer
libraries come with the ``bench`` extra (``./dev bench`` installs it); without them their
rows are skipped and said so.

Run: ./dev bench python_peers [--rows N] [--wide-rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report, time_interleaved

ROW_ID = "_ai_unique_id_"
LEVEL = 3  # OmniTable's write.compression_level default (zstd)
WIDE_COLUMNS, WIDE_GROUPS = 200, 50
TEXT_WORDS, WORD = 42, 6  # 42 six-byte words: 252 bytes of text a row

# issue 18's goals: operation -> (peer, most OmniTable time / peer time, how the issue says it)
GOALS: dict[str, list[tuple[str, float, str]]] = {
    "ingest": [("parquet", 1.2, "<= 1.2x"), ("lance", 1.5, "<= 1.5x")],
    "add_column": [
        ("lance", 1 / 1.5, "peer >= 1.5x slower"),
        ("delta", 1 / 1.5, "peer >= 1.5x slower"),
    ],
    "narrow": [("parquet", 1.0, "<= 1.0x"), ("lance", 1.2, "<= 1.2x")],
    "selective": [("parquet", 0.5, ">= 2x faster"), ("lance", 2.0, "<= 2x")],
}


def text_column(rows: int, rng: np.random.Generator) -> pa.Array:
    """~250-byte strings of 42 words drawn from 4096 five-letter words (compressible like text)."""
    letters = rng.integers(ord("a"), ord("z") + 1, size=(4096, WORD), dtype=np.uint8)
    letters[:, -1] = ord(" ")
    chars = letters[rng.integers(0, 4096, size=(rows, TEXT_WORDS))].reshape(-1)
    offsets = np.arange(0, rows * TEXT_WORDS * WORD + 1, TEXT_WORDS * WORD, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))


def make_data(rows: int, seed: int = 0) -> pa.Table:
    """The issue's shape: id, 3 floats, a short string (one of 100), ~250-byte text."""
    rng = np.random.default_rng(seed)
    short = np.array([f"cat_{i:02d}" for i in range(100)])
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "x": rng.random(rows),
            "y": rng.random(rows),
            "z": rng.random(rows),
            "s": pa.array(short[rng.integers(0, 100, rows)]),
            "text": text_column(rows, rng),
        }
    )


def make_wide(rows: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, Any] = {"id": np.arange(rows, dtype=np.int64)}
    cols.update({f"f{i}": rng.random(rows) for i in range(WIDE_COLUMNS)})
    return pa.table(cols)


def _tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Peers:
    """One data set written, extended and read by each system under ``work``."""

    def __init__(self, work: Path, data: pa.Table, groups: dict[str, list[str]] | None) -> None:
        import omnitable

        self.work, self.data, self.groups = work, data, groups
        self.wh = omnitable.connect(work / "omni")
        self.omni_data = data.drop_columns(["id"])  # OmniTable's id is its _ai_unique_id_
        self.tables = itertools.count()
        self.lance: Any = _optional("lance")
        self.delta: Any = _optional("deltalake")

    def systems(self) -> list[str]:
        names = ["omnitable", "parquet"]
        return names + [n for n, m in (("lance", self.lance), ("delta", self.delta)) if m]

    # -- ingest -----------------------------------------------------------------------------

    def ingest(self, system: str, k: int) -> None:
        """Write the data as a new table/file/dataset number ``k``."""
        path = self.work / f"{system}-{k}"
        if system == "omnitable":
            t = self.wh.create_table(f"t{k}", self.omni_data.schema, groups=self.groups)
            t.append(self.omni_data, "b0")
        elif system == "parquet":
            pq.write_table(
                self.data, str(path) + ".parquet", compression="zstd", compression_level=LEVEL
            )
        elif system == "lance":
            self.lance.write_dataset(self.data, str(path))
        else:
            props = self.delta.WriterProperties(compression="ZSTD", compression_level=LEVEL)
            self.delta.write_deltalake(str(path), self.data, writer_properties=props)

    def ingest_variants(self) -> dict[str, Callable[[], Any]]:
        counters = {s: itertools.count(1) for s in self.systems()}
        return {s: (lambda s=s: self.ingest(s, next(counters[s]))) for s in self.systems()}

    # -- reads (of table/file/dataset 0) ----------------------------------------------------

    def read(self, system: str, columns: list[str], where: tuple[str, float] | None) -> pa.Table:
        path = str(self.work / f"{system}-0")
        expr = None if where is None else pc.field(where[0]) < where[1]
        if system == "omnitable":
            return self.wh.table("t0").read(columns=columns, where=expr)
        if system == "parquet":
            return pq.read_table(path + ".parquet", columns=columns, filters=expr)
        if system == "lance":
            sql = None if where is None else f"{where[0]} < {where[1]}"
            return self.lance.dataset(path).to_table(columns=columns, filter=sql)
        dataset = self.delta.DeltaTable(path).to_pyarrow_dataset()
        return dataset.to_table(columns=columns, filter=expr)

    def read_variants(
        self, columns: list[str], where: tuple[str, float] | None
    ) -> dict[str, Callable[[], Any]]:
        expected = None
        for s in self.systems():  # same rows everywhere (order aside) before timing
            got = self.read(s, columns, where).sort_by([(columns[0], "ascending")])
            if expected is None:
                expected = got
            assert got.cast(expected.schema).equals(expected), f"{s} read different rows"
        return {s: (lambda s=s: self.read(s, columns, where)) for s in self.systems()}

    # -- add one column keyed by id --------------------------------------------------------

    def add_column(self, system: str, k: int) -> None:
        """Attach column ``new{k}`` to table/file/dataset 0, keyed by id (rows shuffled)."""
        n = self.data.num_rows
        rng = np.random.default_rng(k)
        ids = rng.permutation(n).astype(np.int64)
        values = rng.random(n)
        name = f"new{k}"
        path = self.work / f"{system}-0"
        if system == "omnitable":
            new = pa.table({ROW_ID: ids, name: values})
            self.wh.table("t0").add_columns(new, group=name)
        elif system == "parquet":  # a rewrite: read, join on id, write the new file
            new = pa.table({"id": ids, name: values})
            old = pq.read_table(str(path) + ".parquet")
            joined = old.join(new, "id", join_type="left outer").sort_by("id")
            pq.write_table(
                joined, str(path) + f"-{k}.parquet", compression="zstd", compression_level=LEVEL
            )
        elif system == "lance":
            new = pa.table({"id": ids, name: values})
            self.lance.dataset(str(path)).merge(new, left_on="id")
        else:
            new = pa.table({"id": ids, name: values})
            props = self.delta.WriterProperties(compression="ZSTD", compression_level=LEVEL)
            dt = self.delta.DeltaTable(str(path))
            dt.merge(
                new, "t.id = s.id", source_alias="s", target_alias="t", merge_schema=True,
                writer_properties=props,
            ).when_matched_update_all().execute()  # fmt: skip

    def add_column_variants(self) -> tuple[dict[str, Callable[[], Any]], dict[str, list[int]]]:
        """The timed variants and, per system, the bytes each call added on storage."""
        counters = {s: itertools.count(1) for s in self.systems()}
        written: dict[str, list[int]] = {s: [] for s in self.systems()}

        def size(system: str) -> int:
            # table 0's files (and OmniTable's catalog), not every table the ingests wrote:
            # walking those would be timed with the add
            omni = self.work / "omni"
            paths = (
                [*omni.glob("catalog.db*"), *omni.glob("t0-*")]
                if system == "omnitable"
                else self.work.glob(f"{system}-0*")
            )
            return sum(_tree_size(p) for p in paths if p.exists())

        def run(system: str) -> None:
            before = size(system)
            self.add_column(system, next(counters[system]))
            written[system].append(size(system) - before)

        return {s: (lambda s=s: run(s)) for s in self.systems()}, written


@functools.cache
def _optional(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        print(f"  ({module} is not installed: its rows are left out; pip install '.[bench]')")
        return None


def _rows(
    op: str, times: dict[str, float], extra: dict[str, str] | None = None
) -> tuple[list[tuple[str, str, str]], dict[str, float]]:
    """Report rows for one operation: each system's time, then OmniTable's ratios and goals."""
    rows = [(s, fmt_seconds(t) + (extra or {}).get(s, ""), "") for s, t in times.items()]
    ratios: dict[str, float] = {}
    for peer, limit, goal in GOALS[op]:
        if peer in times:
            ratios[peer] = times["omnitable"] / times[peer]
            verdict = "met" if ratios[peer] <= limit else "MISSED"
            rows.append((f"omnitable / {peer}", fmt_ratio(ratios[peer]), f"goal {goal}: {verdict}"))
    for peer in ("parquet", "lance"):
        if peer in times and peer not in ratios:
            ratios[peer] = times["omnitable"] / times[peer]
            rows.append((f"omnitable / {peer}", fmt_ratio(ratios[peer]), ""))
    return rows, {f"{op}_vs_{peer}": r for peer, r in ratios.items()}


def run_table(
    title: str,
    work: Path,
    data: pa.Table,
    groups: dict[str, list[str]] | None,
    narrow: list[str],
    selective: tuple[list[str], tuple[str, float]],
    repeats: int,
    read_rounds: int = 2,
    write_rounds: int = 1,
) -> dict[str, float]:
    """All four operations on one data set; returns OmniTable's ratios. Reads are timed in
    ``repeats * read_rounds`` rounds (more for reads of a few ms, whose median of 6 is noise),
    ingests and added columns in ``repeats * write_rounds`` (more for the wide table's, of
    30-300 ms, whose medians of 3 moved by 1.7x between runs on 2 shared cores); ingests in a
    new order each round."""
    peers = Peers(work, data, groups)
    for s in peers.systems():
        peers.ingest(s, 0)  # the table every read and add-column uses
    results: dict[str, float] = {}
    ingest = time_interleaved(
        peers.ingest_variants(), repeats=repeats * write_rounds, warmup=0, shuffle=True
    )
    rows, ratios = _rows("ingest", ingest)
    report(f"{title}: ingest (append / write)", rows)
    results.update(ratios)

    # each round in a new order (each system follows each other one)
    reads = repeats * read_rounds
    narrow_t = time_interleaved(peers.read_variants(narrow, None), repeats=reads, shuffle=True)
    cols, where = selective
    selective_t = time_interleaved(peers.read_variants(cols, where), repeats=reads, shuffle=True)

    variants, written = peers.add_column_variants()
    added = time_interleaved(variants, repeats=repeats * write_rounds, warmup=0)
    sizes = {s: f", {fmt_bytes(float(np.median(b)))}" for s, b in written.items()}
    rows, ratios = _rows("add_column", added, sizes)
    report(f"{title}: add one column keyed by id (time, bytes written)", rows)
    results.update(ratios)
    rows, ratios = _rows("narrow", narrow_t)
    report(f"{title}: read {len(narrow)} columns {narrow}", rows)
    results.update(ratios)
    rows, ratios = _rows("selective", selective_t)
    report(f"{title}: read {cols} where {where[0]} < {where[1]}", rows)
    results.update(ratios)
    peers.wh.close()
    return results


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python_peers")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--wide-rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "python_peers"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = make_data(args.rows)
    print(f"{args.rows:,} rows ({fmt_bytes(data.nbytes)} in memory) ...")
    results = run_table(
        f"{args.rows:,} rows",
        work / "narrow",
        data,
        None,
        ["x", "y"],
        (["text"], ("x", 0.01)),
        args.repeats,
    )
    del data
    wide = make_wide(args.wide_rows)
    per = WIDE_COLUMNS // WIDE_GROUPS
    groups = {f"g{g}": [f"f{g * per + i}" for i in range(per)] for g in range(WIDE_GROUPS)}
    picked = [f"f{g * per + 1}" for g in (0, 12, 25, 49)]  # one column from each of 4 groups
    print(f"\n{args.wide_rows:,} rows x {WIDE_COLUMNS} columns ({fmt_bytes(wide.nbytes)}) ...")
    wide_results = run_table(
        f"wide {args.wide_rows:,} x {WIDE_COLUMNS}",
        work / "wide",
        wide,
        groups,
        picked,
        (picked, ("f0", 0.01)),
        args.repeats,
        read_rounds=10,
        write_rounds=3,
    )
    results.update({f"wide_{k}": v for k, v in wide_results.items()})
    shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
