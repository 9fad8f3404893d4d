from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omnitable.exceptions import ValidationError
from omnitable.vocabulary.stats import compute_stats, decode_value, encode_value
from omnitable.vocabulary.types import canonical_arrow_type, parse_type_spec, to_arrow, to_ddl

_leaf = st.sampled_from(
    [
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("us"),
        pa.decimal128(12, 3),
    ]
)
_names = st.text(alphabet="abcxyz_ 1`", min_size=1, max_size=6)
_types = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(pa.list_, inner),
        st.builds(pa.map_, st.sampled_from([pa.string(), pa.int32()]), inner),
        st.lists(st.tuples(_names, inner), min_size=1, max_size=3, unique_by=lambda x: x[0]).map(
            lambda fs: pa.struct(fs)
        ),
    ),
    max_leaves=6,
)


@given(_types)
def test_ddl_round_trip(t: pa.DataType) -> None:
    assert to_arrow(to_ddl(t)).equals(t)


@pytest.mark.parametrize(
    "given_type, canonical",
    [
        (pa.large_string(), pa.string()),
        (pa.dictionary(pa.int8(), pa.string()), pa.string()),
        (pa.uint32(), pa.int64()),
        (pa.timestamp("ns", tz="Europe/Paris"), pa.timestamp("us", tz="UTC")),
        (pa.large_list(pa.uint8()), pa.list_(pa.int16())),
        (pa.float16(), pa.float32()),
    ],
)
def test_canonical_types(given_type: pa.DataType, canonical: pa.DataType) -> None:
    assert canonical_arrow_type(given_type).equals(canonical)


@pytest.mark.parametrize("bad", [pa.uint64(), pa.null(), pa.decimal256(50, 2)])
def test_types_without_lossless_form(bad: pa.DataType) -> None:
    with pytest.raises(ValidationError):
        canonical_arrow_type(bad, "c")


def test_spark_style_ddl_is_accepted() -> None:
    assert parse_type_spec("STRUCT<a: INT, b: ARRAY<STRING>>", "c").equals(
        pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])
    )
    assert parse_type_spec("long", "c") == pa.int64()
    with pytest.raises(ValidationError, match="unknown type"):
        parse_type_spec("varchar(3)", "c")


@pytest.mark.parametrize(
    "t, values",
    [
        (pa.int64(), [3, -7, None]),
        (pa.float64(), [0.1, float("inf"), -2.5]),
        (pa.string(), ["b", "a", None]),
        (pa.date32(), [dt.date(2026, 1, 1), dt.date(1969, 12, 31)]),
        (pa.timestamp("us", tz="UTC"), [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)]),
        (pa.decimal128(10, 2), [Decimal("-1.50"), Decimal("3.25")]),
        (pa.bool_(), [True, False]),
    ],
)
def test_stats_encode_min_max_and_round_trip(t: pa.DataType, values: list) -> None:  # type: ignore[type-arg]
    arr = pa.array(values, t)
    s = compute_stats(arr)
    assert s.null_count == arr.null_count
    present = [v for v in values if v is not None]
    assert decode_value(s.min_value, t) == min(present)  # type: ignore[arg-type]
    assert decode_value(s.max_value, t) == max(present)  # type: ignore[arg-type]
    assert encode_value(min(present), t) == s.min_value


def test_stats_not_kept_where_planning_cannot_use_them() -> None:
    assert compute_stats(pa.array([1.0, float("nan")])).min_value is None
    assert compute_stats(pa.array(["x" * 65, "a"])).max_value is None
    assert compute_stats(pa.array([[1]])).min_value is None
    all_null = compute_stats(pa.array([None, None], pa.int64()))
    assert (all_null.null_count, all_null.min_value) == (2, None)
