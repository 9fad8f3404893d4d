"""``omnitable.preprocess``: fit/apply equal a numpy reference, the record round trip on SQLite
and PostgreSQL bound to its snapshot, schema changes and bad specs refused."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
import omnitable.preprocess as pp
from omnitable.exceptions import (
    NotFoundError,
    SchemaMismatchError,
    UnknownColumnError,
    ValidationError,
)

_names = itertools.count()
SPEC = {
    "age": "standardize",
    "income": {"op": "min_max"},
    "score": {"op": "bucketize", "num_buckets": 4},
    "height": {"op": "bucketize", "boundaries": [150, 170.5, 190]},
    "city": {"op": "vocabulary", "top_k": 3},
    "color": {"op": "one_hot", "top_k": 2},
}


@pytest.fixture(scope="module")
def local_wh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[omnitable.Warehouse]:
    wh = omnitable.connect(str(tmp_path_factory.mktemp("pre") / "wh"))
    yield wh
    wh.close()


def _table(wh: omnitable.Warehouse, n: int = 400) -> omnitable.Table:
    rng = np.random.default_rng(3)
    t = wh.create_table(f"p{next(_names)}", {"age": "bigint", "income": "double", "score":
                        "double", "height": "double", "city": "string", "color": "string"})  # fmt: skip
    ages = [None if k % 17 == 0 else int(v) for k, v in enumerate(rng.integers(18, 90, n))]
    t.append(pa.table({
        "age": pa.array(ages, pa.int64()),
        "income": rng.lognormal(10, 1, n),
        "score": rng.normal(size=n),
        "height": rng.normal(170, 15, n).round(1),
        "city": [f"c{int(k)}" for k in rng.zipf(1.5, n) % 6],
        "color": pa.array([None if k % 5 == 0 else ["red", "blue", "green"][k % 3]
                           for k in range(n)]),
    }), "b0", target_fragment_rows=64)  # fmt: skip
    t.delete(pc.field("income") > 60_000)  # fitted on live rows only
    return t


def _reference(df: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    age = df["age"].astype(np.float64)
    live = age[~np.isnan(age)]
    inc, score = df["income"], df["score"]
    cities, counts = np.unique(df["city"], return_counts=True)
    top = [c for _, c in sorted(zip(-counts, cities, strict=True))][:3]
    city = np.array([top.index(c) if c in top else 3 for c in df["city"]])
    colors = [c for c in df["color"] if c is not None]
    cv, cc = np.unique(colors, return_counts=True)
    top2 = [c for _, c in sorted(zip(-cc, cv, strict=True))][:2]
    color = np.array([top2.index(c) if c in top2 else 2 for c in df["color"]])
    bounds = np.quantile(score, [0.25, 0.5, 0.75])
    return {
        "age": np.where(np.isnan(age), 0.0, (age - live.mean()) / live.std()).astype(np.float32),
        "income": ((inc - inc.min()) / (inc.max() - inc.min())).astype(np.float32),
        "score": np.searchsorted(bounds, score, side="right"),
        "height": np.searchsorted([150, 170.5, 190], df["height"], side="right"),
        "city": city,
        "color": np.eye(3, dtype=np.float32)[color],
    }


def test_fit_apply_equal_numpy(local_wh: omnitable.Warehouse) -> None:
    t = _table(local_wh)
    fitted = pp.fit(t, SPEC)
    data = t.read(list(SPEC))
    df = {n: data[n].to_numpy(zero_copy_only=False) for n in SPEC}
    df["age"] = data["age"].cast(pa.float64()).to_numpy(zero_copy_only=False)
    want = _reference(df)
    as_dict = fitted.apply(df)
    batch = fitted(data.to_batches()[0])  # callable: a loader's transform=
    table = fitted.apply(data.append_column("other", pa.array(range(len(data)))))
    assert table.column("other").to_pylist() == list(range(len(data)))
    first = batch.num_rows
    for name, expected in want.items():
        np.testing.assert_allclose(as_dict[name], expected, rtol=1e-6, atol=1e-6)
        got = table.column(name).combine_chunks()
        if name == "color":
            assert got.type == pa.list_(pa.float32(), 3)
            got = got.flatten()
        np.testing.assert_allclose(got.to_numpy().reshape(expected.shape), expected, rtol=1e-6,
                                   atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(batch.column(name).to_numpy(zero_copy_only=False).tolist()
                                   if name != "color" else batch.column(name).flatten()
                                   .to_numpy().reshape(first, 3), expected[:first], rtol=1e-6,
                                   atol=1e-6)  # fmt: skip
    assert fitted.params("city")["values"][0] == "c1"  # zipf: the most frequent first
    nulls = fitted.apply({"score": np.array([np.nan, 9.0]), "age": np.array([np.nan, 0]),
                          "income": np.zeros(2), "height": np.zeros(2),
                          "city": np.array(["zz", "c1"], object),
                          "color": np.array([None, "red"], object)})  # fmt: skip
    assert nulls["score"].tolist() == [4, 3] and nulls["age"][0] == 0.0
    assert nulls["city"].tolist() == [3, 0] and nulls["color"][0].tolist() == [0, 0, 1]


def test_record_round_trip(wh: omnitable.Warehouse) -> None:
    t = _table(wh, 120)
    v1 = t.version
    first = pp.fit(t, {"age": "standardize"}, name="ages")
    t.append(pa.table({"age": [1000] * 10}), "b1")
    pp.fit(t, {"age": "min_max", "city": "vocabulary"}, name="v2")
    old = pp.fit(t, {"age": "min_max"}, version=v1, name="old")
    assert pp.list_fitted(t) == ["ages", "old", "v2"]
    loaded = pp.load(wh.table(t.name), "ages")
    assert loaded.to_json() == first.to_json() and loaded.version == v1
    assert pp.load(t, "v2").params("age")["max"] == 1000.0
    assert old.params("age")["max"] < 1000 and old.version == v1
    refit = pp.fit(t, {"age": "standardize"}, name="ages")  # a refit replaces the record
    assert pp.load(t, "ages").version == refit.version == t.version
    pp.delete(t, "old")
    assert pp.list_fitted(t) == ["ages", "v2"]
    with pytest.raises(NotFoundError, match="fitted: ages, v2"):
        pp.load(t, "old")
    with pytest.raises(NotFoundError):
        pp.delete(t, "old")


def test_schema_change_is_refused(local_wh: omnitable.Warehouse) -> None:
    t = _table(local_wh, 80)
    pp.fit(t, {"age": "standardize", "score": "min_max"}, name="a")
    t.rename_column("age", "years")
    with pytest.raises(SchemaMismatchError, match="'age' was renamed to 'years'"):
        pp.load(t, "a")
    t.rename_column("years", "age")
    assert pp.load(t, "a").columns.keys() == {"age", "score"}
    t.retire("score")
    with pytest.raises(SchemaMismatchError, match="'score' was retired"):
        pp.load(t, "a")


def test_bad_specs(local_wh: omnitable.Warehouse) -> None:
    t = _table(local_wh, 40)
    cases = [
        ({}, ValidationError, "non-empty dict"),
        ({"nope": "standardize"}, UnknownColumnError, "no column 'nope'"),
        ({"age": "scale"}, ValidationError, "op must be one of"),
        ({"city": "standardize"}, ValidationError, "not numeric"),
        ({"income": {"op": "vocabulary"}}, ValidationError, "a vocabulary holds"),
        ({"age": {"op": "bucketize"}}, ValidationError, "exactly one"),
        ({"age": {"op": "bucketize", "boundaries": [3, 1]}}, ValidationError, "sorted"),
        ({"age": {"op": "min_max", "top_k": 3}}, ValidationError, "unknown option"),
        ({"city": {"op": "one_hot", "top_k": 0}}, ValidationError, "positive int"),
    ]
    for spec, error, match in cases:
        with pytest.raises(error, match=match):
            pp.fit(t, spec)
    with pytest.raises(ValidationError, match="name must be"):
        pp.fit(t, {"age": "min_max"}, name="a b")
    with pytest.raises(ValidationError, match="omnitable Table"):
        pp.fit("t", {"age": "min_max"})
    fitted = pp.fit(t, {"age": "min_max", "city": "vocabulary"})
    with pytest.raises(ValidationError, match="has no column"):
        fitted.apply({"age": np.zeros(2)})
    with pytest.raises(ValidationError, match="must be numeric"):
        fitted.apply(pa.table({"age": ["x"], "city": ["c1"]}))
    with pytest.raises(ValidationError, match="RecordBatch"):
        fitted.apply([1, 2])
