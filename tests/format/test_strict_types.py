"""A reader with ``strict_types`` (the ``python`` engine's) reads a column stored as another type
only when the table's type holds every stored value (``widens``, as Spark's Parquet reader
does); other stored types are schema drift (``SchemaMismatchError``), never a silent cast."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.exceptions import SchemaMismatchError
from omnitable.format.reader import FragmentReader, widens

INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
TYPES = [*INTS, pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(),
         pa.decimal128(6, 2), pa.decimal128(10, 2), pa.decimal128(10, 4), pa.date32()]  # fmt: skip


def _values(t: pa.DataType) -> st.SearchStrategy[pa.Array]:
    """Values of ``t`` across its whole range (its extremes included)."""
    if pa.types.is_integer(t):
        lo, hi = -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
        return st.lists(st.integers(lo, hi) | st.sampled_from([lo, hi]), min_size=1, max_size=20)
    if pa.types.is_float32(t):
        return st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=20)
    if pa.types.is_floating(t):
        return st.lists(st.floats(allow_nan=False), min_size=1, max_size=20)
    if pa.types.is_decimal(t):
        digits = st.integers(-(10**t.precision) + 1, 10**t.precision - 1)
        scaled = digits.map(lambda d: decimal.Decimal(d).scaleb(-t.scale))
        return st.lists(scaled, min_size=1, max_size=20)
    if pa.types.is_date32(t):
        return st.lists(st.dates(), min_size=1, max_size=20)
    if pa.types.is_binary(t):
        return st.lists(st.binary(max_size=8), min_size=1, max_size=20)
    return st.lists(st.text(max_size=8), min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TYPES), st.sampled_from(TYPES), st.data())
def test_a_widening_keeps_every_value(
    stored: pa.DataType, want: pa.DataType, data: st.DataObject
) -> None:
    """Where ``widens`` says yes, every value of ``stored`` casts to ``want`` and back unchanged."""
    if not widens(stored, want):
        return
    arr = pa.array(data.draw(_values(stored)), stored)
    assert arr.cast(want).cast(stored).equals(arr)


@pytest.mark.parametrize(
    ("stored", "want"),
    [
        (pa.int64(), pa.string()),  # the schema drift of the dirty-input tests
        (pa.int64(), pa.int32()),
        (pa.int64(), pa.float64()),  # 2**53 + 1 has no double
        (pa.float64(), pa.float32()),
        (pa.float64(), pa.int64()),
        (pa.string(), pa.binary()),
        (pa.decimal128(10, 2), pa.decimal128(10, 4)),  # 8 digits left of the point, 6 wanted
        (pa.decimal128(10, 4), pa.decimal128(10, 2)),  # digits after the point lost
        (pa.date32(), pa.timestamp("us")),
    ],
)
def test_narrowing_or_other_types_do_not_widen(stored: pa.DataType, want: pa.DataType) -> None:
    assert not widens(stored, want)


def test_strict_reader_reads_widened_columns_and_refuses_drift(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("t", {"n": "bigint", "s": "string"})
    t.append(pa.table({"n": [1, 2, 3], "s": ["a", "b", "c"]}), "b1")
    snap = t.snapshot()
    (frag,) = snap.fragments
    ids = [snap.column(c).column_id for c in ("n", "s")]
    files = snap.resolve(frag.fragment_id, ids)
    path = t.location.child_path(files[ids[0]].path)  # type: ignore[union-attr]
    data = pq.read_table(path)
    n = snap.column("n").physical_name
    narrow = data.set_column(data.schema.get_field_index(n), n, pa.array([1, 2, 3], pa.int32()))
    pq.write_table(narrow, path)  # stored as int: the table's bigint holds it
    strict = FragmentReader(t.location, snap, strict_types=True)
    got = strict.read_fragment(frag, ["n", "s"])
    assert got.column("n").type == pa.int64() and got.column("n").to_pylist() == [1, 2, 3]
    s = snap.column("s").physical_name
    drift = narrow.set_column(narrow.schema.get_field_index(s), s, pa.array([7, 8, 9]))
    pq.write_table(drift, path)  # `s` stored as int64: not a string column any more
    with pytest.raises(SchemaMismatchError, match="stored as int64, the table's type is string"):
        FragmentReader(t.location, snap, strict_types=True).read_fragment(frag, ["s"])
    lenient = FragmentReader(t.location, snap).read_fragment(frag, ["s"])  # Table.read's rule
    assert lenient.column("s").to_pylist() == ["7", "8", "9"]
