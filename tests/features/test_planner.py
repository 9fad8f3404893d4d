from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.features.definition import Feature

from .helpers import commit_outputs


def _sql(name: str, inputs: list[str], version: str = "1") -> Feature:
    return omnitable.sql_feature(
        name, " || ".join(f"`{i}`" for i in inputs), "string", version, inputs=inputs
    )


@pytest.fixture
def chain(wh: omnitable.Warehouse) -> omnitable.Table:
    """raw text -> parsed -> cleaned -> quality, plus an unrelated feature 'other'."""
    t = wh.create_table("c", {"text": "string"})
    for b in ("b1", "b2"):
        t.append(pa.table({"text": ["x"] * 10}), b, target_fragment_rows=5)
    t.register(
        _sql("parsed", ["text"]),
        _sql("cleaned", ["parsed"]),
        _sql("quality", ["cleaned"]),
        _sql("other", ["text"]),
    )
    return t


def _ids(t: omnitable.Table, batch: str | None = None) -> list[str]:
    return [
        f.fragment_id
        for f in t.snapshot(with_files=False).fragments
        if batch is None or f.batch_name == batch
    ]


def _feature(t: omnitable.Table, name: str) -> Feature:
    return next(f for f in t.features() if f.name == name)


def test_everything_missing_plans_the_whole_chain_in_order(chain: omnitable.Table) -> None:
    plan = chain.backfill(["quality"])
    assert [[f.name for f in s.features] for s in plan.steps] == [
        ["parsed"],
        ["cleaned"],
        ["quality"],
    ]
    assert all(len(s.fragments) == 4 for s in plan.steps)
    text = plan.explain()
    assert "step 1: level 1" in text and "quality -> quality" in text and "other" not in text


def test_done_columns_are_reused(chain: omnitable.Table) -> None:
    commit_outputs(chain, _feature(chain, "parsed"), _ids(chain))
    commit_outputs(chain, _feature(chain, "cleaned"), _ids(chain, "b1"))
    plan = chain.backfill("quality")
    steps = {s.features[0].name: s for s in plan.steps}
    assert set(steps) == {"cleaned", "quality"}
    assert {f.batch_name for f in steps["cleaned"].fragments} == {"b2"}
    assert len(steps["quality"].fragments) == 4
    assert any(r.feature == "parsed@1" and r.batch == "b1" for r in plan.reused)
    assert "reused" in plan.explain()


def test_version_bump_upstream_makes_downstream_stale(chain: omnitable.Table) -> None:
    for name in ("parsed", "cleaned", "quality"):
        commit_outputs(chain, _feature(chain, name), _ids(chain))
    assert chain.backfill("quality").is_empty
    assert chain.status().state("b1", "quality") == "done"
    chain.register(_sql("parsed", ["text"], version="2"))
    grid = chain.status()
    assert grid.state("b1", "parsed") == "stale"
    assert grid.state("b1", "quality") == "done"  # its own inputs are unchanged so far
    plan = chain.backfill("quality")
    assert [s.features[0].name for s in plan.steps] == ["parsed", "cleaned", "quality"]
    assert "computed by version 1, current is 2" in plan.explain()
    # after parsed is recomputed, cleaned's input is newer than cleaned: stale by input
    commit_outputs(chain, _feature(chain, "parsed"), _ids(chain))
    assert chain.status().state("b2", "cleaned") == "stale"
    assert "input 'parsed' changed" in chain.backfill("cleaned").explain()


def test_partial_state_and_batch_selection(chain: omnitable.Table) -> None:
    commit_outputs(chain, _feature(chain, "parsed"), _ids(chain, "b1")[:1])
    assert chain.status().state("b1", "parsed") == "partial"
    assert chain.status().state("b2", "parsed") == "missing"
    plan = chain.backfill("parsed", batches=["b1"])
    assert [f.fragment_id for f in plan.steps[0].fragments] == _ids(chain, "b1")[1:]
    with pytest.raises(omnitable.NotFoundError, match="batch"):
        chain.backfill("parsed", batches=["nope"])
    with pytest.raises(omnitable.NotFoundError, match="registered features"):
        chain.backfill("nope")


def test_fusion_groups_features_sharing_inputs(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("f", {"text": "string", "url": "string"})
    t.append(pa.table({"text": ["a"], "url": ["u"]}), "b")
    t.register(
        *[_sql(f"t{i}", ["text"]) for i in range(4)],
        _sql("u0", ["url"]),
        _sql("both", ["url", "text"]),
        _sql("next", ["t0"]),
    )
    plan = t.backfill(["t0", "t1", "t2", "t3", "u0", "both", "next"])
    groups = [sorted(f.name for f in s.features) for s in plan.steps]
    # 'both' reads url and text, so it links the text features and u0 into one scan
    assert groups == [["both", "t0", "t1", "t2", "t3", "u0"], ["next"]]
    assert plan.steps[0].inputs == ["url", "text"] or set(plan.steps[0].inputs) == {"url", "text"}
    assert "fused x6" in plan.explain()


# -- property: the plan is the minimal missing closure -----------------------------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6))
def test_plan_is_the_minimal_missing_closure(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int
) -> None:
    rng = random.Random(seed)
    with omnitable.connect(tmp_path_factory.mktemp("wh")) as wh:
        t = wh.create_table("p", {"r0": "string", "r1": "string"})
        t.append(pa.table({"r0": ["a"] * 6, "r1": ["b"] * 6}), "b1", target_fragment_rows=3)
        t.append(pa.table({"r0": ["a"] * 2, "r1": ["b"] * 2}), "b2")
        deps: dict[str, list[str]] = {}
        feats = []
        for i in range(n):
            pool = ["r0", "r1"] + [f"f{j}" for j in range(i)]
            inputs = rng.sample(pool, rng.randint(1, min(3, len(pool))))
            deps[f"f{i}"] = inputs
            feats.append(_sql(f"f{i}", inputs))
        t.register(*feats)
        frags = _ids(t)
        # random history: commit some features for some fragments, in random order, some with
        # an outdated version
        computed: dict[tuple[str, str], tuple[int, str]] = {}
        events = [(f, fr) for f in deps for fr in frags if rng.random() < 0.6]
        rng.shuffle(events)
        for order, (name, fr) in enumerate(events):
            version = "1" if rng.random() < 0.8 else "0"
            commit_outputs(t, _feature(t, name), [fr], version=version)
            computed[(name, fr)] = (order, version)
        targets = rng.sample(sorted(deps), rng.randint(1, n))

        def ancestors(names: list[str]) -> set[str]:
            out: set[str] = set()
            stack = list(names)
            while stack:
                x = stack.pop()
                if x not in out:
                    out.add(x)
                    stack += [d for d in deps[x] if d in deps]
            return out

        def done(name: str, fr: str) -> bool:
            if (name, fr) not in computed or computed[(name, fr)][1] != "1":
                return False
            at = computed[(name, fr)][0]
            return all(computed.get((d, fr), (-1, ""))[0] < at for d in deps[name] if d in deps)

        need: dict[str, set[str]] = {}
        for name in sorted(ancestors(targets), key=lambda x: int(x[1:])):
            need[name] = {
                fr
                for fr in frags
                if not done(name, fr)
                or any(fr in need.get(d, set()) for d in deps[name] if d in deps)
            }
        expected = {k: v for k, v in need.items() if v}

        plan = t.backfill(targets)
        got = {
            name: {f.fragment_id for f in frs} for s in plan.steps for name, frs in s.work.items()
        }
        assert got == expected
        levels = [s.level for s in plan.steps]
        assert levels == sorted(levels)
