"""Per-record functions (``omnitable.isolation.per_record``): every kind of bad record is found
as it fails, alone, without bisection; every other record is computed exactly once per call.

The function takes one record (``x``, ``tag``) and does to it what its tag says. Each test
checks that the call completes, exactly the bad records are NULL with the right kind, every
other record is correct, and (where it says so) how many calls and worker starts it took.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from typing import Any

import numpy as np
import pandas as pd
import pytest

from omnitable.exceptions import ValidationError
from omnitable.isolation import (
    IsolationLimitError,
    IsolationPolicy,
    PerRecord,
    engine,
    input_digest,
    per_record,
    run_isolated,
)
from omnitable.isolation.supervisor import POOL

KIND_OF = {
    "raise": "exception",
    "sleep": "timeout",
    "swallow": "timeout",
    "oom": "memory",
    "segv": "crash",
    "exit": "crash",
    "abort": "crash",
    "sigkill": "memory",
    "blocked": "timeout",
}
IN_PROCESS = ("raise", "sleep", "swallow", "oom")  # the tags a process survives


def record_fn(x: float, tag: str) -> float:
    """x * 2 + 1, unless the tag says to fail."""
    if tag == "raise":
        raise ValueError(f"bad value {x}")
    if tag == "sleep":
        time.sleep(3600)
    if tag == "swallow":  # catches the alarm's Deadline (a BaseException) and returns late
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            with contextlib.suppress(BaseException):
                time.sleep(0.01)
    if tag == "oom":
        np.ones(2**31)  # 16 GiB: refused by the memory budget, never actually allocated
    if tag == "segv":
        ctypes.string_at(0)
    if tag == "exit":
        os._exit(7)
    if tag == "abort":
        os.abort()
    if tag == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if tag == "blocked":  # a wait the alarm cannot interrupt: the parent must kill the worker
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)
    return x * 2 + 1


def batch(n: int, planted: dict[int, str]) -> pd.DataFrame:
    tags = ["ok"] * n
    for pos, tag in planted.items():
        tags[pos] = tag
    return pd.DataFrame({"x": np.arange(n, dtype=float), "tag": tags})


def check(result: Any, frame: pd.DataFrame, planted: dict[int, str]) -> None:
    """Exactly the planted records failed, with their kinds and digests; the rest is right."""
    got = {f.position: f.kind for f in result.failures}
    assert got == {pos: KIND_OF[tag] for pos, tag in planted.items()}
    for f in result.failures:
        row = frame.iloc[f.position]
        assert f.input_digest == input_digest([row["x"], row["tag"]])
    y = result.outputs["y"]
    expected = frame["x"] * 2 + 1
    ok = ~frame.index.isin(list(planted))
    assert y[ok].tolist() == expected[ok].tolist()
    assert y[~ok].isna().all()


FN = per_record(record_fn)


def test_in_process_every_kind_fails_alone_in_one_call() -> None:
    planted = {3: "raise", 40: "sleep", 41: "oom", 77: "swallow", 99: "raise"}
    frame = batch(100, planted)
    policy = IsolationPolicy(mode="inprocess", timeout_s=0.2, memory_mb=1024)
    result = run_isolated(FN, frame, output_names=["y"], policy=policy)
    check(result, frame, planted)
    assert result.calls == 1  # no bisection: one loop over the records
    by_pos = {f.position: f for f in result.failures}
    assert by_pos[3].exception_type == "ValueError" and "bad value 3.0" in by_pos[3].message
    assert "record_fn" in by_pos[3].traceback
    assert by_pos[40].message == "the record exceeded its time budget of 0.2 s"
    assert by_pos[41].message.startswith("over memory_mb=1024")


def test_a_record_under_its_budget_is_not_stopped() -> None:
    slow = per_record(lambda x: time.sleep(x) or x)
    # the alarm ticks every 0.075 s: the 0.3 s record is seen at four or five ticks, and is
    # only stopped once seen at nine (0.6 s)
    frame = pd.DataFrame({"x": [0.0, 0.3, 0.0, 1.2]})
    policy = IsolationPolicy(mode="inprocess", timeout_s=0.6)
    result = run_isolated(slow, frame, output_names=["y"], policy=policy)
    assert [f.position for f in result.failures] == [3]
    assert result.outputs["y"].tolist()[:3] == [0.0, 0.3, 0.0]


@pytest.mark.parametrize("tags", [("segv", "exit"), ("abort", "sigkill"), ("raise", "oom")])
def test_child_finds_each_bad_record_with_one_worker_start_per_death(
    tags: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "CHILD_RECORD_PART", 16)
    planted = {0: tags[0], 37: tags[1], 38: tags[0], 199: tags[1], 120: "sleep", 121: "raise"}
    frame = batch(200, planted)
    policy = IsolationPolicy(mode="subprocess", timeout_s=0.2, memory_mb=1024)
    POOL.close_all()  # the batch starts its worker
    result = run_isolated(FN, frame, output_names=["y"], policy=policy)
    check(result, frame, planted)
    deaths = [pos for pos, tag in planted.items() if tag not in IN_PROCESS]
    # after each death one call resumes past the record, and one more recomputes the records
    # since the last part received, if any (bisection would take dozens per bad record)
    assert result.calls <= 1 + 2 * len(deaths)
    # the first start, and a respawn after each death but the one at the batch's last record
    assert result.child_starts == 1 + len([pos for pos in deaths if pos != 199])
    for f in result.failures:
        if planted[f.position] in ("segv", "exit", "abort"):
            assert f.message.endswith("during the record"), f.message


def test_child_kills_a_record_that_blocks_its_alarm() -> None:
    planted = {5: "blocked", 6: "raise"}
    frame = batch(20, planted)
    policy = IsolationPolicy(mode="subprocess", timeout_s=0.1, kill_grace_s=0.2)
    result = run_isolated(FN, frame, output_names=["y"], policy=policy)
    check(result, frame, planted)
    blocked = next(f for f in result.failures if f.position == 5)
    assert "did not stop at its alarm" in blocked.message
    assert "without progress" in blocked.message


def test_child_keeps_the_parts_received_before_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash loses only the records after the last part received: with parts of 10, a
    crash at 95 recomputes records 90-94 and nothing before them."""
    monkeypatch.setattr(engine, "CHILD_RECORD_PART", 10)

    def counted(x: float, tag: str) -> float:
        with open(log, "a") as f:
            f.write(f"{x}\n")
        return record_fn(x, tag)

    log = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"omt-records-{os.getpid()}.log")
    if os.path.exists(log):
        os.remove(log)
    planted = {95: "segv"}
    frame = batch(100, planted)
    policy = IsolationPolicy(mode="subprocess", timeout_s=1.0)
    result = run_isolated(per_record(counted), frame, output_names=["y"], policy=policy)
    check(result, frame, planted)
    with open(log) as f:
        seen = [float(line) for line in f]
    os.remove(log)
    assert sorted(set(seen)) == [float(i) for i in range(100)]
    again = sorted(x for x in set(seen) if seen.count(x) > 1)
    assert again == [90.0, 91.0, 92.0, 93.0, 94.0]


def test_several_outputs_tuple_or_mapping_and_a_malformed_record() -> None:
    def two(x: float) -> Any:
        if x == 2:
            return (1.0,)  # one value for two outputs: this record fails, kind exception
        if x == 3:
            return {"a": x, "b": -x}
        return (x, -x)

    frame = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0]})
    for mode in ("inprocess", "subprocess"):
        policy = IsolationPolicy(mode=mode)
        result = run_isolated(per_record(two), frame, output_names=["a", "b"], policy=policy)
        assert [(f.position, f.kind, f.exception_type) for f in result.failures] == [
            (2, "exception", "ValidationError")
        ]
        out = result.outputs
        assert out["a"].tolist()[:2] + out["a"].tolist()[3:] == [0.0, 1.0, 3.0]
        assert out["b"].tolist()[3] == -3.0
        assert out.isna().iloc[2].all()


def test_integer_outputs_with_failures_stay_exact() -> None:
    big = 2**62 + 1
    fn = per_record(lambda x: big + int(x) if x != 1 else 1 // 0)
    frame = pd.DataFrame({"x": [0.0, 1.0, 2.0]})
    result = run_isolated(fn, frame, output_names=["y"], policy=IsolationPolicy(mode="inprocess"))
    assert result.outputs["y"].tolist() == [big, None, big + 2]


def test_max_failures_stops_the_batch() -> None:
    frame = batch(50, {i: "raise" for i in range(0, 50, 5)})
    policy = IsolationPolicy(mode="inprocess", max_failures=3)
    with pytest.raises(IsolationLimitError, match="more than max_failures=3") as err:
        run_isolated(FN, frame, output_names=["y"], policy=policy)
    assert len(err.value.failures) == 10


def test_mode_off_and_outside_the_engine_map_the_records() -> None:
    frame = batch(5, {})
    out = run_isolated(FN, frame, output_names=["y"], policy=IsolationPolicy(mode="off"))
    assert out.outputs["y"].tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert FN(frame["x"], frame["tag"]).tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    with pytest.raises(ValueError, match="bad value"):
        FN(pd.Series([1.0]), pd.Series(["raise"]))
    both = per_record(lambda x: (x, x + 1), outputs=["a", "b"])
    assert both(pd.Series([1, 2])).to_dict("list") == {"a": [1, 2], "b": [2, 3]}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValidationError, match="not callable"):
        per_record(42)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="unique non-empty strings"):
        per_record(len, outputs=["a", "a"])
    declared = per_record(len, outputs=["a"])
    with pytest.raises(ValidationError, match="declared with outputs"):
        run_isolated(declared, batch(2, {}), output_names=["b"], policy=IsolationPolicy())
    assert per_record(FN) is FN and isinstance(FN, PerRecord) and FN.__name__ == "record_fn"


class SlowToPickle(float):
    """A result whose pickling takes ``delay`` seconds (sending it outlasts a record budget)."""

    delay = 0.4

    def __reduce__(self) -> Any:
        time.sleep(self.delay)
        return (float, (float(self),))


class ExitsWhenPickled(float):
    """A result whose pickling ends the process (the worker dies sending its part)."""

    def __reduce__(self) -> Any:
        os._exit(9)


def test_child_sending_a_slow_part_blames_no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The alarm only counts while a record runs: a part whose pickling outlasts timeout_s
    is sent whole, and every record of the call is computed."""
    monkeypatch.setattr(engine, "CHILD_RECORD_PART", 16)
    fn = per_record(lambda x: SlowToPickle(x) if x == 5 else x)
    frame = pd.DataFrame({"x": np.arange(40, dtype=float)})
    policy = IsolationPolicy(mode="subprocess", timeout_s=0.1)
    result = run_isolated(fn, frame, output_names=["y"], policy=policy)
    assert result.failures == []
    assert result.outputs["y"].tolist() == list(range(40))


def test_child_dying_while_sending_a_part_fails_that_part_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A death between records is retried once, then the part being sent fails; no record of
    another part is blamed (before, the last record of the part took the blame, then the one
    before it, and so on)."""
    monkeypatch.setattr(engine, "CHILD_RECORD_PART", 16)
    fn = per_record(lambda x: ExitsWhenPickled(x) if x == 20 else x)
    frame = pd.DataFrame({"x": np.arange(64, dtype=float)})
    policy = IsolationPolicy(mode="subprocess", timeout_s=1.0)
    result = run_isolated(fn, frame, output_names=["y"], policy=policy)
    assert [f.position for f in result.failures] == list(range(16, 32))
    assert {(f.kind, f.exception_type) for f in result.failures} == {("crash", "exit(9)")}
    y = result.outputs["y"]
    assert y.iloc[:16].tolist() == list(range(16)) and y.iloc[32:].tolist() == list(range(32, 64))


class SlowToLoad:
    """A per-record function that takes 1.5 s to unpickle in the worker, with a payload too
    large for the zygote to preload it (so each worker loads it itself)."""

    def __init__(self) -> None:
        self.ballast = b"x" * (9 << 20)

    def __call__(self, x: float) -> float:
        return x + 1

    def __reduce__(self) -> Any:
        return (_load_slowly, (self.ballast,))


def _load_slowly(ballast: bytes) -> SlowToLoad:
    time.sleep(1.5)
    return SlowToLoad()


def test_child_loading_slowly_is_not_a_record_timeout() -> None:
    """Until the worker starts a record it is held to the call's budget, not a record's."""
    frame = pd.DataFrame({"x": np.arange(30, dtype=float)})
    policy = IsolationPolicy(mode="subprocess", timeout_s=0.1, kill_grace_s=0.2)
    result = run_isolated(per_record(SlowToLoad()), frame, output_names=["y"], policy=policy)
    assert result.failures == []
    assert result.outputs["y"].tolist() == [x + 1 for x in range(30)]


def test_feature_per_record_with_several_outputs_and_isolation_off() -> None:
    import pyarrow as pa

    import omnitable
    from omnitable import ROW_ID
    from omnitable.exec import task

    def both(x: float) -> tuple[float, float]:
        return x, -x

    table = pa.table({"x": [1.0, 2.0], ROW_ID: [0, 1]})
    for fn in (both, per_record(both)):  # already wrapped: unwrapped, not wrapped twice
        f = omnitable.feature(
            inputs=["x"], outputs={"a": "double", "b": "double"}, version="1", per_record=True
        )(fn)
        for isolation in ("off", "inprocess"):
            out, failures, _ = task.compute_feature(f, table, {}, isolation, False, None)
            assert failures == []
            assert out.to_pydict() == {"a": [1.0, 2.0], "b": [-1.0, -2.0]}


def test_as_the_body_of_a_pandas_udf() -> None:
    """``isolated(per_record(f))``: what a plain PySpark pandas UDF calls, batch by batch."""
    from omnitable.isolation import isolated

    udf = isolated(FN, timeout_s=0.2, errors="column", mode="inprocess")
    frame = batch(30, {4: "raise", 9: "sleep"})
    out = udf(frame["x"], frame["tag"])
    assert out["error_kind"].tolist()[4] == "exception" and out["error_kind"][9] == "timeout"
    assert out["value"].isna().tolist() == [i in (4, 9) for i in range(30)]
    assert udf.failure_counts == {"exception": 1, "timeout": 1}
