from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID


@pytest.fixture
def scored(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(
        "s",
        {"score": "double", "lang": "string", "body": "string"},
        groups={"meta": ["score", "lang"]},
    )
    rng = np.random.default_rng(0)
    for b in range(4):
        n = 100
        t.append(
            pa.table(
                {
                    "score": np.arange(n) + b * 1000.0,
                    "lang": ["en" if i % 2 else "de" for i in range(n)],
                    "body": [f"payload {b}-{i} " + rng.bytes(100).hex() for i in range(n)],
                }
            ),
            f"batch-{b}",
            target_fragment_rows=50,
            row_group_size=10,
        )
    return t


def test_where_prunes_fragments_by_statistics(scored: omnitable.Table) -> None:
    res = scored.scan(columns=["score"], where=pc.field("score") >= 3050)
    assert res.table.column("score").to_pylist() == [3050.0 + i for i in range(50)]
    assert res.stats.fragments_total == 8
    assert res.stats.fragments_read == 1


def test_where_on_append_name_prunes_fragments(scored: omnitable.Table) -> None:
    res = scored.scan(columns=["score"], where=pc.field("_ai_append_name_") == "batch-2")
    assert res.stats.fragments_read == 2
    assert res.table.num_rows == 100


def test_late_materialization_reads_only_surviving_row_groups(scored: omnitable.Table) -> None:
    full = scored.scan(columns=["body"], batches=["batch-0"])
    narrow = scored.scan(columns=["body", "score"], where=pc.field("score") == 7.0)
    assert narrow.table.column("score").to_pylist() == [7.0]
    assert narrow.table.column("body").to_pylist()[0].startswith("payload 0-7 ")
    assert narrow.stats.bytes_read < full.stats.bytes_read / 4


def test_where_with_column_not_projected(scored: omnitable.Table) -> None:
    out = scored.read(columns=["lang"], where=(pc.field("score") < 4) & (pc.field("lang") == "en"))
    assert out.column_names == ["lang"]
    assert out.column("lang").to_pylist() == ["en", "en"]


def test_pruned_read_equals_unpruned_filter(scored: omnitable.Table) -> None:
    everything = scored.read()
    for expr in [
        pc.field("score") > 1049.5,
        pc.field("lang") == "de",
        pc.field("score").is_null(),
        (pc.field("score") < 10) | (pc.field("score") > 3090),
        pc.field("_ai_append_name_").isin(["batch-1", "batch-3"]),
    ]:
        assert scored.read(where=expr).equals(everything.filter(expr)), str(expr)


def test_read_errors(scored: omnitable.Table) -> None:
    with pytest.raises(omnitable.UnknownColumnError, match="nope"):
        scored.read(columns=["nope"])
    with pytest.raises(omnitable.UnknownColumnError, match="nope"):
        scored.read(where=pc.field("nope") > 1)
    with pytest.raises(omnitable.ValidationError, match="Expression"):
        scored.read(where="score > 1")  # type: ignore[arg-type]
    with pytest.raises(omnitable.ValidationError, match="list of column names"):
        scored.read(columns="score")  # type: ignore[arg-type]


def test_time_travel(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("tt", {"x": "int"})
    t.append(pa.table({"x": pa.array([1], pa.int32())}), "a")
    t.append(pa.table({"x": pa.array([2], pa.int32())}), "b")
    assert t.read(columns=["x"], version=1).column("x").to_pylist() == [1]
    assert t.read(columns=["x"], version=0).num_rows == 0
    assert t.read(columns=["x"]).column("x").to_pylist() == [1, 2]
    assert [h.op for h in t.history()] == ["append", "append", "create"]
    assert t.history(limit=2) == t.history()[:2]
    assert [(b.name, b.rows) for b in t.batches(version=1)] == [("a", 1)]
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(omnitable.ValidationError, match="limit must be a positive integer"):
            t.history(limit=bad)  # type: ignore[arg-type]


def test_rich_types_round_trip(wh: omnitable.Warehouse) -> None:
    data = pa.table(
        {
            "ts": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, 6)], pa.timestamp("us", tz="UTC")),
            "ntz": pa.array([dt.datetime(2026, 1, 2)], pa.timestamp("us")),
            "d": pa.array([dt.date(2026, 11, 29)]),
            "dec": pa.array([Decimal("12.34")], pa.decimal128(10, 2)),
            "bin": pa.array([b"\x00\x01"]),
            "st": pa.array([{"a": 1, "b": "x"}]),
            "lst": pa.array([[1.5, None]]),
            "mp": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
            "flag": pa.array([True]),
        }
    )
    t = wh.create_table("rich", data.schema)
    t.append(data, "b")
    out = t.read(columns=data.column_names)
    assert out.to_pylist() == data.to_pylist()
    pruned = t.read(
        columns=["d"],
        where=pc.field("ts")
        > pa.scalar(dt.datetime(2026, 1, 2, 3, 4, 5, 6), pa.timestamp("us", tz="UTC")),
    )
    assert pruned.num_rows == 0


# -- property: any layout reads back exactly what was written ---------------------------------

_types = st.sampled_from(
    [
        pa.int64(),
        pa.float64(),
        pa.string(),
        pa.list_(pa.int32()),
        pa.struct([("a", pa.int16()), ("b", pa.string())]),
    ]
)


def _values(t: pa.DataType, n: int, rng: np.random.Generator) -> pa.Array:
    nulls = rng.random(n) < 0.1
    if t == pa.int64():
        vals: list = [int(v) for v in rng.integers(-1000, 1000, n)]  # type: ignore[type-arg]
    elif t == pa.float64():
        vals = [float(v) for v in rng.normal(size=n)]
    elif t == pa.string():
        vals = ["s" * int(k) for k in rng.integers(0, 5, n)]
    elif pa.types.is_list(t):
        vals = [[int(x) for x in rng.integers(0, 9, int(k))] for k in rng.integers(0, 3, n)]
    else:
        vals = [{"a": int(k), "b": str(k)} for k in rng.integers(0, 50, n)]
    return pa.array([None if z else v for v, z in zip(vals, nulls, strict=True)], t)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    types=st.lists(_types, min_size=1, max_size=6),
    n_groups=st.integers(1, 3),
    batch_sizes=st.lists(st.integers(0, 60), min_size=1, max_size=3),
    frag_rows=st.integers(1, 40),
    row_group=st.integers(1, 17),
    seed=st.integers(0, 2**31),
    extra_rg=st.integers(1, 23),
)
def test_any_layout_reads_back_exactly(
    tmp_path_factory: pytest.TempPathFactory,
    types: list,  # type: ignore[type-arg]
    n_groups: int,
    batch_sizes: list,
    frag_rows: int,  # type: ignore[type-arg]
    row_group: int,
    seed: int,
    extra_rg: int,
) -> None:
    rng = np.random.default_rng(seed)
    names = [f"c{i}" for i in range(len(types))]
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(f"g{int(rng.integers(0, n_groups))}", []).append(name)
    with omnitable.connect(tmp_path_factory.mktemp("wh")) as wh:
        t = wh.create_table(
            "p",
            pa.schema([pa.field(n, ty) for n, ty in zip(names, types, strict=True)]),
            groups=groups,
        )
        expected = []
        for b, n in enumerate(batch_sizes):
            data = pa.table(
                {name: _values(ty, n, rng) for name, ty in zip(names, types, strict=True)}
            )
            t.append(data, f"b{b}", target_fragment_rows=frag_rows, row_group_size=row_group)
            expected.append(data)
        # a later column with other row-group boundaries, covering a random subset of rows
        ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_numpy()
        chosen = ids[rng.random(len(ids)) < 0.7]
        extra_vals = pa.array(rng.normal(size=len(chosen)))
        if len(chosen):
            t.add_columns(pa.table({ROW_ID: chosen, "extra": extra_vals}))
        out = t.read()
        want = pa.concat_tables(expected)
        for name in names:
            assert (
                out.column(name)
                .combine_chunks()
                .equals(want.column(name).combine_chunks().cast(out.schema.field(name).type))
            ), name
        if len(chosen):
            got = dict(
                zip(out.column(ROW_ID).to_pylist(), out.column("extra").to_pylist(), strict=True)
            )
            exp = dict(zip(chosen.tolist(), extra_vals.to_pylist(), strict=True))
            assert all(got[i] == exp.get(i) for i in got)
        # pruning never changes results
        expr = pc.field(names[0]).is_valid()
        if pa.types.is_integer(types[0]) or pa.types.is_floating(types[0]):
            expr = pc.field(names[0]) > 0
        assert t.read(where=expr).equals(out.filter(expr))
