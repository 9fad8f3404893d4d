"""Adaptive call size (docs/isolation.md, *Dirty streams*): after a failed call, the following
batches of the stream are cut into smaller calls; bad records are still isolated exactly and
every other record gets exactly the output of the function."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnitable.isolation import CallSizing, IsolationPolicy, run_isolated
from omnitable.isolation.engine import GROW_AFTER_BATCHES

POLICY = IsolationPolicy(mode="inprocess")


class Counting:
    """x * 3 - 1 over a call; raises when the call holds a negative value; counts rows seen."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, x: pd.Series) -> pd.Series:
        self.rows += len(x)
        if (x < 0).any():
            raise ValueError("negative record")
        return x * 3 - 1


def stream(n: int, batches: int, bad: set[int]) -> list[pd.Series]:
    """``batches`` batches of ``n`` records; the records at the ``bad`` stream positions < 0."""
    values = np.arange(n * batches, dtype=np.float64) + 0.5
    values[sorted(bad)] *= -1
    return [pd.Series(values[i : i + n]) for i in range(0, n * batches, n)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 300),
    batches=st.integers(1, 12),
    data=st.data(),
)
def test_adaptive_sizing_isolates_exactly_the_bad_records(
    n: int, batches: int, data: st.DataObject
) -> None:
    bad = data.draw(st.sets(st.integers(0, n * batches - 1), max_size=12), label="bad")
    sizing = CallSizing()
    fn = Counting()
    for i, batch in enumerate(stream(n, batches, bad)):
        result = run_isolated(fn, [batch], output_names=["y"], policy=POLICY, sizing=sizing)
        failed = {f.position for f in result.failures}
        assert failed == {p - i * n for p in bad if i * n <= p < (i + 1) * n}
        assert {f.kind for f in result.failures} <= {"exception"}
        got = result.columns[0]
        for pos in range(n):
            if pos in failed:
                assert got.iloc[pos] is None or np.isnan(got.iloc[pos])
            else:
                assert got.iloc[pos] == batch.iloc[pos] * 3 - 1
        assert sizing.rows is None or sizing.rows >= 1


def test_a_failure_shrinks_the_following_calls_so_a_bad_record_wastes_less() -> None:
    n = 8_000
    batches = stream(n, 3, {100, n + 4_321})
    fn, sizing = Counting(), CallSizing()
    run_isolated(fn, [batches[0]], output_names=["y"], policy=POLICY, sizing=sizing)
    assert sizing.rows == n // POLICY.split_factor
    fn.rows = 0
    second = run_isolated(fn, [batches[1]], output_names=["y"], policy=POLICY, sizing=sizing)
    # without adaptive sizing: the whole batch wasted, then n * 8/7 rows of bisection (> 2n)
    assert [f.position for f in second.failures] == [4_321]
    assert fn.rows < 1.5 * n
    fn.rows = 0
    third = run_isolated(fn, [batches[2]], output_names=["y"], policy=POLICY, sizing=sizing)
    assert (third.failures, fn.rows, third.calls) == ([], n, POLICY.split_factor)


def test_a_clean_stream_keeps_one_call_per_batch_and_sizing_grows_back() -> None:
    n = 1_000
    fn, sizing = Counting(), CallSizing()
    for batch in stream(n, 3, set()):
        result = run_isolated(fn, [batch], output_names=["y"], policy=POLICY, sizing=sizing)
        assert (result.calls, sizing.rows) == (1, None)
    run_isolated(fn, stream(n, 1, {7}), output_names=["y"], policy=POLICY, sizing=sizing)
    sizes = []
    for batch in stream(n, GROW_AFTER_BATCHES * 4, set()):
        run_isolated(fn, [batch], output_names=["y"], policy=POLICY, sizing=sizing)
        sizes.append(sizing.rows)
    assert sizes[GROW_AFTER_BATCHES - 1] == 2 * (n // POLICY.split_factor)
    assert sizes[-1] is None
    result = run_isolated(fn, stream(n, 1, set()), output_names=["y"], policy=POLICY, sizing=sizing)
    assert result.calls == 1
