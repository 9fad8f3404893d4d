"""Foundation benchmark: the Python zip reader vs one wide Parquet file vs a key join.

Data: N rows (default 5,000,000) of 12 float columns in 4 groups of 3, plus one text column.
Prints, measured side by side in one run:
  * omnitable reading 4 columns from 4 different groups vs pyarrow reading the same 4 columns
    from one wide Parquet file (target <= 1.2x);
  * a pyarrow join on the key of 4 separate Parquet files vs omnitable (target >= 5x slower);
  * add_columns of one new float column: bytes written vs the table's size.

Run: ./dev bench python_read [--rows N]
"""

from __future__ import annotations

import argparse
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report, time_interleaved

GROUPS = 4
PER_GROUP = 3
KEY = "_ai_unique_id_"


def _columns() -> list[str]:
    return [f"f{g}_{i}" for g in range(GROUPS) for i in range(PER_GROUP)]


def make_data(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    data = {name: rng.random(rows) for name in _columns()}
    words = np.array(["alpha", "beta", "gamma", "delta", "omni", "table", "spark", "arrow"])
    data["text"] = pa.array(
        np.char.add(words[rng.integers(0, 8, rows)], np.arange(rows).astype(str))
    )
    return pa.table(data)


def _tree_size(path: str) -> int:
    fs = pafs.LocalFileSystem()
    return sum(
        i.size or 0
        for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
        if i.type == pafs.FileType.File
    )


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable

    parser = argparse.ArgumentParser(prog="python_read")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "python_read"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = make_data(args.rows)
    data = data.add_column(0, KEY, pa.array(np.arange(args.rows, dtype=np.int64)))
    cols = _columns()
    groups = {f"g{g}": cols[g * PER_GROUP : (g + 1) * PER_GROUP] for g in range(GROUPS)}

    print(f"writing {args.rows:,} rows ({fmt_bytes(data.nbytes)} in memory) three ways ...")
    wh = omnitable.connect(work / "wh")
    t = wh.create_table("bench", data.drop_columns([KEY]).schema, groups=groups)
    t.append(data, "b0")
    wide = str(work / "wide.parquet")
    pq.write_table(data, wide, compression="zstd", row_group_size=131_072)
    separate = []
    for g, members in groups.items():
        path = str(work / f"{g}.parquet")
        pq.write_table(
            data.select([KEY, *members]), path, compression="zstd", row_group_size=131_072
        )
        separate.append(path)
    del data

    wanted = [groups[f"g{g}"][0] for g in range(GROUPS)]  # one column from each group

    def omni() -> pa.Table:
        return t.read(columns=wanted)

    def wide_file() -> pa.Table:
        return pq.read_table(wide, columns=wanted)

    def key_join() -> pa.Table:
        parts = [pq.read_table(p, columns=[KEY, c]) for p, c in zip(separate, wanted, strict=True)]
        out = parts[0]
        for p in parts[1:]:
            out = out.join(p, KEY, join_type="inner")
        return out

    assert omni().num_rows == wide_file().num_rows == key_join().num_rows == args.rows
    times = time_interleaved(
        {"omnitable": omni, "wide": wide_file, "join": key_join}, repeats=args.repeats
    )

    table_bytes = _tree_size(t.location.path)
    before = table_bytes
    ids = t.read(columns=[KEY]).column(KEY)
    t.add_columns(
        pa.table({KEY: ids, "new_score": np.random.default_rng(1).random(len(ids))}), group="new"
    )
    written = _tree_size(t.location.path) - before
    one_column = pq.ParquetFile(wide).metadata
    col_bytes = sum(
        one_column.row_group(i).column(1).total_compressed_size
        for i in range(one_column.num_row_groups)
    )

    omni_vs_wide = times["omnitable"] / times["wide"]
    join_vs_omni = times["join"] / times["omnitable"]
    report(
        f"Python reader, {args.rows:,} rows, 4 columns from 4 groups",
        [
            ("omnitable zip reader", fmt_seconds(times["omnitable"]), ""),
            ("pyarrow, one wide file", fmt_seconds(times["wide"]), ""),
            ("pyarrow, 4-way key join", fmt_seconds(times["join"]), ""),
            ("omnitable / wide file", fmt_ratio(omni_vs_wide), "target <= 1.2x"),
            ("key join / omnitable", fmt_ratio(join_vs_omni), "target >= 5x"),
        ],
    )
    report(
        "add_columns of one float column",
        [
            ("table size before", fmt_bytes(table_bytes), ""),
            ("bytes written", fmt_bytes(written), ""),
            ("one float column in the wide file", fmt_bytes(col_bytes), "reference"),
            ("written / table size", f"{written / table_bytes:.1%}", "new column only"),
            ("written / one column", fmt_ratio(written / col_bytes), "~1x"),
        ],
    )
    wh.close()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "omnitable_vs_wide": omni_vs_wide,
        "join_vs_omnitable": join_vs_omni,
        "add_columns_fraction": written / table_bytes,
    }


if __name__ == "__main__":
    main()
