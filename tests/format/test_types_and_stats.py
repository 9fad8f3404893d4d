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


@given(
    st.sampled_from([pa.float16(), pa.float32(), pa.float64()]),
    st.lists(
        st.lists(st.one_of(st.none(), st.floats(width=16, allow_nan=True)), max_size=20),
        min_size=1,
        max_size=4,
    ),
)
def test_float_bounds_match_arrows_min_max(
    t: pa.DataType, chunks: list[list[float | None]]
) -> None:
    """Float bounds come from numpy: the same as Arrow's ``min_max`` over chunks, nulls, empty
    and all-null chunks, infinities and signed zeros; none with a NaN."""
    import numpy as np
    import pyarrow.compute as pc

    col = pa.chunked_array(
        [pa.array(np.array([np.nan if v is None else v for v in c], t.to_pandas_dtype()), t,
                  mask=np.array([v is None for v in c], bool)) for c in chunks], t
    )  # fmt: skip
    s = compute_stats(col)
    assert s.null_count == col.null_count
    present = [v for c in chunks for v in c if v is not None]
    if not present or any(v != v for v in present):
        assert s.min_value is None and s.max_value is None
        return
    mm = pc.min_max(col.cast(pa.float32()) if t == pa.float16() else col)  # no float16 kernel
    assert float(decode_value(s.min_value, t)) == float(mm["min"].as_py())  # type: ignore[arg-type]
    assert float(decode_value(s.max_value, t)) == float(mm["max"].as_py())  # type: ignore[arg-type]


def test_stats_not_kept_where_planning_cannot_use_them() -> None:
    assert compute_stats(pa.array([1.0, float("nan")])).min_value is None
    assert compute_stats(pa.array(["x" * 65, "a"])).max_value is None
    assert compute_stats(pa.array([[1]])).min_value is None
    all_null = compute_stats(pa.array([None, None], pa.int64()))
    assert (all_null.null_count, all_null.min_value) == (2, None)
