"""Dirty input through Spark: the `on_corrupt` read option and the JVM ScanMetricsListener
(task input metrics, scan reports and skipped fragments, per job tag), driven from Python."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import omnitable

pytestmark = pytest.mark.spark


def _listener(spark: Any) -> Any:
    listener = spark.sparkContext._jvm.io.omnitable.spark.metrics.ScanMetricsListener
    listener.install(spark.sparkContext._jsc.sc())
    listener.install(spark.sparkContext._jsc.sc())  # idempotent
    return listener


@pytest.fixture
def dirty(tmp_path: Path) -> tuple[omnitable.Table, str]:
    """3 fragments of 400 rows; the `text` file of the middle one is truncated."""
    t, bad, _ = _broken(tmp_path, "truncated")
    return t, bad


def _read(spark: Any, t: omnitable.Table, **options: str) -> Any:
    r = spark.read.format("omnitable").option("warehouse", t.warehouse.uri)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(t.name)


def test_corrupt_file_fails_by_default(spark: Any, dirty: Any) -> None:
    t, bad = dirty
    with pytest.raises(Exception) as info:
        _read(spark, t, corrupt_retries="0").select("n", "text").collect()
    msg = str(info.value)
    assert f"[OMNITABLE_FILE_READ] Cannot read fragment {bad}" in msg
    assert "on_corrupt=skip_fragment" in msg
    # the intact group of the same fragment still reads
    assert _read(spark, t).select("n").count() == 1200


def test_skip_fragment_skips_whole_fragment_and_reports_it(spark: Any, dirty: Any) -> None:
    t, bad = dirty
    listener = _listener(spark)
    listener.reset()
    sc = spark.sparkContext
    tag = "omnitable-test-step0"
    sc.addJobTag(tag)
    try:
        rows = _read(spark, t, on_corrupt="skip_fragment").select("n", "text").collect()
    finally:
        sc.removeJobTag(tag)
    assert sorted(r.n for r in rows) == list(range(0, 400)) + list(range(800, 1200))
    assert all(r.text.startswith(f"doc {r.n} ") for r in rows)

    snap = json.loads(listener.snapshot())
    step = snap["byJobTag"][tag]
    assert step["recordsRead"] == 800
    assert step["bytesRead"] > 0
    assert step["omnitableScans"] == 1
    assert step["fragmentsRead"] == 2
    (corrupt,) = step["corruptFragments"]
    assert corrupt["fragment"] == bad and corrupt["table"] == "docs"
    assert f"/{bad}/wide-" in corrupt["file"] and "Cannot read column file" in corrupt["error"]
    assert snap["total"]["corruptFragments"] == step["corruptFragments"]

    # the session setting does the same
    spark.conf.set("spark.omnitable.read.on_corrupt", "skip_fragment")
    try:
        assert len(_read(spark, t).select("text").collect()) == 800
    finally:
        spark.conf.unset("spark.omnitable.read.on_corrupt")


def test_listener_counts_rereads(spark: Any, tmp_path: Path) -> None:
    """Reading the same column twice reads its bytes twice (what fused backfills avoid)."""
    wh = omnitable.connect(tmp_path / "wh")
    t = wh.create_table("t", {"text": "string"})
    t.append(
        pa.table({"text": [f"row {i} " * 10 for i in range(3000)]}), "b", target_fragment_rows=1000
    )
    listener = _listener(spark)
    frags = ",".join(f.fragment_id for f in t.snapshot().fragments)

    def bytes_read(times: int) -> int:
        listener.reset()
        for _ in range(times):
            df = _read(spark, t, fragments=frags, split_fragments="false").select("text")
            df.collect()
        total = json.loads(listener.snapshot())["total"]
        assert total["omnitableScans"] == times and total["recordsRead"] == 3000 * times
        return int(total["bytesRead"])

    once = bytes_read(1)
    assert once > 0
    assert bytes_read(3) == 3 * once


def _broken(tmp_path: Path, how: str) -> tuple[omnitable.Table, str, Path]:
    """3 fragments of 400 rows; the `text` file of the middle one broken as ``how`` says:
    (table, that fragment's id, that file)."""
    wh = omnitable.connect(tmp_path / how)
    t = wh.create_table("docs", {"n": "bigint", "text": "string"}, groups={"wide": ["text"]})
    t.append(
        pa.table({"n": range(1200), "text": [f"doc {i} " + "w" * (i % 30) for i in range(1200)]}),
        "b1",
        target_fragment_rows=400,
        row_group_size=100,
    )
    snap = t.snapshot()
    bad = snap.fragments[1].fragment_id
    (f,) = [f for f in snap.files_by_fragment[bad] if f.group_name == "wide"]
    path = Path(t.location.child_path(f.path))
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "garbage":  # same size, no Parquet magic
        path.write_bytes(
            (bytes(range(256)) * (path.stat().st_size // 256 + 1))[: path.stat().st_size]
        )
    elif how == "wrong_type":  # a valid file of the right rows whose column holds integers
        name = pq.read_schema(path).names[0]
        pq.write_table(pa.table({name: pa.array(range(400), pa.int64())}), path)
    elif how == "unreadable":
        path.chmod(0)
    elif how == "missing":
        path.unlink()
    elif how == "unknown_scheme":  # the files live on a store no FileSystem is configured for
        with sqlite3.connect(tmp_path / how / "catalog.db") as db:
            db.execute(
                "UPDATE omnitable_meta SET value = 'nosuchfs://bucket/wh' WHERE key = 'root'"
            )
    return t, bad, path


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_skip_fragment_skips_genuine_corruption(spark: Any, tmp_path: Path, how: str) -> None:
    t, _, _ = _broken(tmp_path, how)
    df = _read(spark, t, on_corrupt="skip_fragment", corrupt_retries="0").select("n", "text")
    assert sorted(r.n for r in df.collect()) == list(range(0, 400)) + list(range(800, 1200))


@pytest.mark.parametrize(
    ("how", "cause"),
    [
        ("wrong_type", "OMNITABLE_SCHEMA_MISMATCH"),
        ("unreadable", "Permission denied"),
        ("missing", "FileNotFoundException"),
        ("unknown_scheme", 'No FileSystem for scheme "nosuchfs"'),
    ],
)
def test_skip_fragment_fails_on_what_is_not_corruption(
    spark: Any, tmp_path: Path, how: str, cause: str
) -> None:
    """Schema drift, permission denied, a missing file or file system: the read fails with the
    cause instead of silently skipping the fragment."""
    t, _, path = _broken(tmp_path, how)
    if how == "unreadable" and os.access(path, os.R_OK):
        pytest.skip(
            "this process may read a chmod 000 file (root with CAP_DAC_OVERRIDE); run pytest under "
            "`setpriv --bounding-set=-dac_override,-dac_read_search` to include this case"
        )
    with pytest.raises(Exception) as info:
        _read(spark, t, on_corrupt="skip_fragment").select("n", "text").collect()
    msg = str(info.value)
    assert cause in msg, msg
    assert "not corruption" in msg, msg
