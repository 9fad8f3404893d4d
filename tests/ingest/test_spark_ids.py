"""The driver does not trust the ids Spark tasks generated from their partition ids."""

from __future__ import annotations

import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.ingest.ids import check_reserved
from omnitable.vocabulary.descriptors import FileDescriptor, FragmentDescriptor
from omnitable.vocabulary.stats import ColumnStats


def _fragment(lo: int, hi: int, seq: int) -> FragmentDescriptor:
    stats = ColumnStats(0, str(lo), str(hi))
    f = FileDescriptor(f"f{seq}", f"fr{seq}", "base", "p", hi - lo + 1, 1, {ROW_ID: stats})
    return FragmentDescriptor(f"fr{seq}", "b", hi - lo + 1, "p", [f], seq)


def test_generated_ids_outside_the_reservation_are_refused() -> None:
    check_reserved([_fragment(0, 9, 0), _fragment(100, 109, 1)], 0, 199)
    with pytest.raises(omnitable.ValidationError, match="outside the reserved range"):
        check_reserved([_fragment(0, 9, 0), _fragment(200, 209, 1)], 0, 199)
    with pytest.raises(omnitable.ValidationError, match="same sequence number"):
        check_reserved([_fragment(0, 9, 0), _fragment(10, 19, 0)], 0, 199)


def test_overlapping_generated_ranges_are_refused() -> None:
    from omnitable.ingest.ids import IdClaim

    with pytest.raises(omnitable.ValidationError, match="overlap"):
        IdClaim.generated([_fragment(0, 9, 0), _fragment(5, 14, 1)], 0)


@pytest.mark.spark
def test_spark_supplied_ids_checked_against_existing_rows_in_spark(
    wh: omnitable.Warehouse,
    spark,  # type: ignore[no-untyped-def]
) -> None:
    import pyarrow as pa

    t = wh.create_table("s", {"x": "double"})
    existing = [-(2**62), 5, 2**62]
    t.append(pa.table({ROW_ID: existing, "x": [1.0, 2.0, 3.0]}), "one")
    df = spark.createDataFrame([(5, 1.0), (7, 2.0), (2**62, 3.0)], [ROW_ID, "x"])
    with pytest.raises(omnitable.ValidationError, match=r"2 supplied _ai_unique_id_ value\(s\)"):
        t.append(df, "two")
    t.append(spark.createDataFrame([(6, 1.0), (2**61, 2.0)], [ROW_ID, "x"]), "three")
    assert sorted(t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()) == sorted(
        [*existing, 6, 2**61]
    )


def test_id_claims_locate_ids_exactly() -> None:
    import numpy as np

    from omnitable.ingest.ids import IdClaim

    gen = IdClaim.generated([_fragment(10, 19, 0), _fragment(40, 49, 1)], 0)
    assert gen.may_overlap(0, 10) and gen.may_overlap(45, 100) and not gen.may_overlap(20, 39)
    values = np.array([9, 10, 19, 20, 39, 40, 49, 50], np.int64)
    assert gen.clashes(values).tolist() == [10, 19, 40, 49]
    empty = IdClaim.generated([], 0)
    assert not empty.may_overlap(0, 2**62) and empty.clashes(values).tolist() == []
    given = IdClaim(0, supplied=np.array([-(2**62), 7, 2**62], np.int64))
    assert given.may_overlap(5, 8) and not given.may_overlap(8, 2**61)
    assert given.clashes(values).tolist() == []


@pytest.mark.spark
def test_spark_supplied_ids_are_checked_as_written_not_as_the_source_gives_them_again(
    wh: omnitable.Warehouse,
    spark,  # type: ignore[no-untyped-def]
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    """A source whose rows change between evaluations: the ids it gave when the files were
    written clash with the table, the ids it would give if run again do not. The checks must see
    the written ids (the source runs once), or the table ends with duplicate ids."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from omnitable._failpoints import hooked

    t = wh.create_table("t", {"x": "long"})
    t.append(pa.table({ROW_ID: list(range(10)), "x": list(range(10))}), "b0")
    offset = tmp_path / "offset"
    offset.write_text("0")
    path = str(offset)

    @F.udf("long")
    def shifted(x):  # type: ignore[no-untyped-def]  # (no hints: a plain Python UDF)
        with open(path) as f:
            return x + int(f.read())

    df = spark.range(10).select(
        shifted.asNondeterministic()(F.col("id")).alias(ROW_ID), F.col("id").alias("x")
    )
    with (
        hooked("spark_ingest.written", lambda: offset.write_text("1000")),
        pytest.raises(omnitable.ValidationError, match="already exist"),
    ):
        t.append(df, "b1")
    assert [b.name for b in t.batches()] == ["b0"]
    ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()
    assert sorted(ids) == list(range(10))
