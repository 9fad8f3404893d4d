"""Record-level isolation: injected failures of every kind at random rates between 0.01 % and 1 %.

Each batch carries a ``tag`` column naming what the function does to the record (``ok``, or a
failure to inject); the function is vectorized and fails for the *whole call* as soon as one
bad record is in it, as real vectorized code does. Every test checks that the call completes,
exactly the bad records are NULL with the right kind, and every other record is correct.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

from omnitable.exceptions import ValidationError
from omnitable.isolation import (
    IsolationLimitError,
    IsolationPolicy,
    input_digest,
    run_isolated,
)

KIND_OF = {
    "raise": "exception",
    "short": "exception",
    "sleep": "timeout",
    "oom": "memory",
    "segv": "crash",
    "exit": "crash",
    "abort": "crash",
    "sigkill": "memory",
}


def tagged_fn(x: pd.Series, tag: pd.Series) -> pd.Series:
    """x * 2 + 1, unless a bad record is in the call: then the whole call fails its way."""
    bad = set(tag.unique()) - {"ok"}
    if "raise" in bad:
        raise ValueError(f"bad value among {len(x)} records")
    if "short" in bad:
        return (x * 2 + 1).iloc[:-1]
    if "oom" in bad:
        np.ones(2**31)  # 16 GiB: refused by the memory budget, never actually allocated
    if "sleep" in bad:
        time.sleep(3600)
    if "segv" in bad:
        ctypes.string_at(0)
    if "exit" in bad:
        os._exit(7)
    if "abort" in bad:
        os.abort()
    if "sigkill" in bad:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 2 + 1


def make_batch(n: int, plant: dict[str, float], seed: int) -> tuple[pd.DataFrame, dict[int, str]]:
    """n records; for each tag, a random set of positions at that rate (at least one)."""
    rng = np.random.default_rng(seed)
    tags = np.array(["ok"] * n, dtype=object)
    free = rng.permutation(n)
    planted: dict[int, str] = {}
    start = 0
    for tag, rate in plant.items():
        count = max(1, round(n * rate))
        for pos in free[start : start + count]:
            tags[pos] = tag
            planted[int(pos)] = tag
        start += count
    return pd.DataFrame({"x": rng.random(n) * 100, "tag": tags}), planted


def rate(seed: int, high: float = 0.01) -> float:
    """A random rate between 0.01 % and ``high``."""
    return float(np.random.default_rng(seed).uniform(0.0001, high))


def check(result, batch: pd.DataFrame, planted: dict[int, str]) -> None:  # type: ignore[no-untyped-def]
    assert len(result.outputs) == len(batch)
    got = {f.position: f.kind for f in result.failures}
    assert got == {pos: KIND_OF[tag] for pos, tag in planted.items()}
    y = result.outputs["y"]
    bad = np.zeros(len(batch), dtype=bool)
    bad[list(planted)] = True
    assert y[bad].isna().all()
    np.testing.assert_allclose(y[~bad].to_numpy(dtype=float), batch.x[~bad] * 2 + 1)
    for f in result.failures:
        assert f.input_digest == input_digest(
            [batch.x.iloc[f.position], batch.tag.iloc[f.position]]
        )


POLICY = {"timeout_s": 0.1, "call_timeout_s": 0.4, "memory_mb": 256}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exceptions_and_bad_results_in_process(seed: int) -> None:
    batch, planted = make_batch(50_000, {"raise": rate(seed), "short": rate(seed + 10)}, seed)
    result = run_isolated(tagged_fn, batch, output_names=["y"], policy=IsolationPolicy())
    check(result, batch, planted)
    assert result.mode == "inprocess"
    short = [f for f in result.failures if planted[f.position] == "short"]
    assert all(
        f.exception_type == "ValidationError" and "rows for 1 input" in f.message for f in short
    )
    raised = [f for f in result.failures if planted[f.position] == "raise"]
    assert all(f.exception_type == "ValueError" and "in tagged_fn" in f.traceback for f in raised)


def test_timeouts_and_memory_in_process() -> None:
    batch, planted = make_batch(2_000, {"sleep": rate(4, 0.002), "oom": rate(5)}, 4)
    result = run_isolated(tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(**POLICY))
    check(result, batch, planted)
    assert result.mode == "inprocess" and result.child_starts == 0


def test_every_kind_in_the_child_process() -> None:
    plant = {"raise": 0.004, "sleep": 0.0001, "oom": 0.0002, "segv": rate(6, 0.002),
             "exit": 0.0001, "abort": 0.0001, "sigkill": 0.0001}  # fmt: skip
    batch, planted = make_batch(5_000, plant, 6)
    policy = IsolationPolicy(mode="subprocess", **POLICY)
    result = run_isolated(tagged_fn, batch, output_names=["y"], policy=policy)
    check(result, batch, planted)
    assert result.mode == "subprocess"
    by_tag = {planted[f.position]: f for f in result.failures}
    assert by_tag["segv"].exception_type == "SIGSEGV" and "Segmentation" in by_tag["segv"].traceback
    assert by_tag["exit"].exception_type == "exit(7)"
    assert by_tag["abort"].exception_type == "SIGABRT"
    assert by_tag["sigkill"].exception_type == "SIGKILL"  # what the kernel OOM killer sends
    assert by_tag["oom"].exception_type.endswith("MemoryError")
    # the crashing calls killed the child; it was respawned and the rest computed
    assert result.child_starts >= len([t for t in planted.values() if KIND_OF[t] != "exception"])


def test_previous_attempt_failed_escalates_to_the_child() -> None:
    batch, planted = make_batch(3_000, {"segv": 0.001, "raise": 0.001}, 7)
    policy = IsolationPolicy()
    result = run_isolated(
        tagged_fn, batch, output_names=["y"], policy=policy, previous_attempt_failed=True
    )
    check(result, batch, planted)
    assert result.mode == "subprocess"


def test_mode_off_lets_the_failure_through() -> None:
    batch, _ = make_batch(1_000, {"raise": 0.001}, 8)
    with pytest.raises(ValueError, match="bad value"):
        run_isolated(tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(mode="off"))
    clean = run_isolated(
        tagged_fn, batch[batch.tag == "ok"], output_names=["y"], policy=IsolationPolicy(mode="off")
    )
    assert clean.mode == "off" and clean.calls == 1


def test_clean_batch_is_one_vectorized_call_and_keeps_dtypes() -> None:
    batch = pd.DataFrame({"x": np.arange(10_000, dtype=np.int64), "tag": "ok"})
    for mode in ("inprocess", "subprocess"):
        result = run_isolated(
            tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(mode=mode, **POLICY)
        )
        assert result.calls == 1 and not result.failures
        assert result.outputs["y"].dtype == np.int64
        assert (result.outputs["y"] == batch.x * 2 + 1).all()


def test_inputs_as_a_list_of_series() -> None:
    batch, planted = make_batch(1_000, {"raise": 0.002}, 12)
    result = run_isolated(
        tagged_fn, [batch.x, batch.tag], output_names=["y"], policy=IsolationPolicy()
    )
    check(result, batch, planted)


def test_failed_integer_outputs_become_none_not_float() -> None:
    batch = pd.DataFrame(
        {"x": np.array([2**60, 1, 2], dtype=np.int64), "tag": ["ok", "raise", "ok"]}
    )
    result = run_isolated(tagged_fn, batch, output_names=["y"], policy=IsolationPolicy())
    assert result.outputs["y"].tolist() == [2**61 + 1, None, 5]


def multi_output(x: pd.Series, tag: pd.Series) -> pd.DataFrame:
    if (tag == "raise").any():
        raise KeyError("boom")
    return pd.DataFrame({"a": x + 1, "b": x.astype(str), "extra": 0})


def test_several_outputs() -> None:
    batch = pd.DataFrame({"x": [1, 2, 3, 4], "tag": ["ok", "ok", "raise", "ok"]})
    result = run_isolated(multi_output, batch, output_names=["a", "b"], policy=IsolationPolicy())
    assert list(result.outputs.columns) == ["a", "b"]
    assert result.outputs["a"].tolist() == [2, 3, None, 5]
    b = result.outputs["b"]  # a string column: pandas' own missing value (NaN for "str")
    assert b.isna().tolist() == [False, False, True, False] and b[b.notna()].tolist() == [
        "1",
        "2",
        "4",
    ]
    assert result.failed_positions == [2] and result.failures[0].exception_type == "KeyError"


def per_record_memory(x: pd.Series) -> pd.Series:
    block = np.ones((len(x), 1024 * 128))  # 1 MiB per record
    return pd.Series(block[:, 0] * x.to_numpy())


def test_memory_budget_is_per_call_so_a_big_clean_batch_is_split_not_failed() -> None:
    batch = pd.DataFrame({"x": np.arange(600, dtype=float)})
    result = run_isolated(
        per_record_memory, batch, output_names=["y"], policy=IsolationPolicy(memory_mb=128)
    )
    assert not result.failures and result.calls > 1
    assert (result.outputs["y"] == batch.x).all()


def test_signal_blocking_call_is_killed_in_the_child() -> None:
    def stuck(x: pd.Series) -> pd.Series:
        if (x == 3).any():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(3600)  # the alarm stays pending: only a kill stops this
        return x

    batch = pd.DataFrame({"x": np.arange(10)})
    policy = IsolationPolicy(mode="subprocess", timeout_s=0.1, kill_grace_s=0.2)
    result = run_isolated(stuck, batch, output_names=["y"], policy=policy)
    assert result.failed_positions == [3]
    assert result.failures[0].kind == "timeout" and "was killed" in result.failures[0].message


def test_child_is_reused_across_batches() -> None:
    batch = pd.DataFrame({"x": np.arange(100.0), "tag": "ok"})
    policy = IsolationPolicy(mode="subprocess")
    run_isolated(tagged_fn, batch, output_names=["y"], policy=policy)
    again = run_isolated(tagged_fn, batch, output_names=["y"], policy=policy)
    assert again.child_starts == 0


def test_timeout_off_the_main_thread() -> None:
    batch, planted = make_batch(200, {"sleep": 0.005}, 9)
    results: dict[str, object] = {}

    def work() -> None:
        results["auto"] = run_isolated(
            tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(**POLICY)
        )
        try:
            run_isolated(
                tagged_fn, batch, output_names=["y"],
                policy=IsolationPolicy(mode="inprocess", **POLICY),
            )  # fmt: skip
        except ValidationError as exc:
            results["inprocess"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    auto = results["auto"]
    check(auto, batch, planted)
    assert auto.mode == "subprocess"  # type: ignore[attr-defined]
    assert "main thread" in str(results["inprocess"])


def test_a_prior_timer_keeps_working() -> None:
    """Someone else's SIGALRM timer (pytest-timeout uses one) survives isolated calls."""
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 100.0)
        batch, planted = make_batch(100, {"sleep": 0.01}, 10)
        result = run_isolated(
            tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(**POLICY)
        )
        check(result, batch, planted)
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] < 100.0 and not fired
        signal.setitimer(signal.ITIMER_REAL, 0.01)  # due while the sleeping record is bisected
        result = run_isolated(
            tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(**POLICY)
        )
        check(result, batch, planted)
        assert fired == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_max_failures_stops_early() -> None:
    batch, _ = make_batch(1_000, {"raise": 0.01}, 11)
    with pytest.raises(IsolationLimitError, match="more than max_failures=3") as info:
        run_isolated(tagged_fn, batch, output_names=["y"], policy=IsolationPolicy(max_failures=3))
    assert len(info.value.failures) == 4


def test_empty_batch() -> None:
    result = run_isolated(
        tagged_fn, pd.DataFrame({"x": [], "tag": []}), output_names=["y"], policy=IsolationPolicy()
    )
    assert len(result.outputs) == 0 and not result.failures


def test_input_digest_is_stable_across_processes() -> None:
    values = [1, 2.5, "héllo", None, b"\x00", [1, 2], {"a": 1}, pd.Timestamp("2026-01-01")]
    code = (
        "import pandas as pd; from omnitable.isolation import input_digest; "
        "print(input_digest([1, 2.5, 'héllo', None, b'\\x00', [1, 2], {'a': 1}, "
        "pd.Timestamp('2026-01-01')]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == input_digest(values)
    assert input_digest([1]) == input_digest([1.0]) == input_digest([np.int64(1)])
    assert input_digest([None]) == input_digest([float("nan")])
    assert input_digest(["1"]) != input_digest([1])
    assert input_digest(["a", "b"]) != input_digest(["ab", ""])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
        ({"memory_mb": 1.5}, "memory_mb must be a positive integer"),
        ({"mode": "thread"}, "mode must be one of auto, inprocess, subprocess, off"),
        ({"split_factor": 1}, "split_factor must be an integer >= 2"),
        ({"timeout_s": 2, "call_timeout_s": 1}, "call_timeout_s (1) is shorter than timeout_s"),
        ({"max_failures": -1}, "max_failures must be an integer >= 0"),
    ],
)
def test_policy_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=r"^Cannot create IsolationPolicy: ") as info:
        IsolationPolicy(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_argument_validation() -> None:
    batch = pd.DataFrame({"x": [1]})
    with pytest.raises(ValidationError, match="output_names must be"):
        run_isolated(tagged_fn, batch, output_names="y", policy=IsolationPolicy())
    with pytest.raises(ValidationError, match="inputs must be a pandas DataFrame or a non-empty"):
        run_isolated(tagged_fn, batch.x, output_names=["y"], policy=IsolationPolicy())  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="input columns differ in length"):
        run_isolated(
            tagged_fn, [batch.x, batch.x[:0]], output_names=["y"], policy=IsolationPolicy()
        )
    lock = threading.Lock()

    def holds_a_lock(x: pd.Series) -> pd.Series:
        with lock:
            return x

    with pytest.raises(ValidationError, match="cannot be pickled"):
        run_isolated(
            holds_a_lock, batch, output_names=["y"], policy=IsolationPolicy(mode="subprocess")
        )


def test_respawned_workers_inherit_the_function_from_the_zygote(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """After a function's first call the zygote holds it (and its modules): a worker forked
    after a crash does not import the function's module again (docs/isolation.md)."""
    module = tmp_path / "omt_import_counter.py"
    log = tmp_path / "imports.log"
    module.write_text(
        "import ctypes, os\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        "def crashy(x):\n"
        "    if (x == 7).any():\n"
        "        ctypes.string_at(0)\n"
        "    return x * 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from omt_import_counter import crashy  # type: ignore[import-not-found]

    log.write_text("")  # count imports in child processes only
    batch = pd.DataFrame({"x": np.arange(64)})
    policy = IsolationPolicy(mode="subprocess", split_factor=2)
    result = run_isolated(crashy, batch, output_names=["y"], policy=policy)
    assert result.failed_positions == [7] and result.failures[0].kind == "crash"
    assert result.child_starts >= 6  # 64 -> 32 -> 16 -> 8 -> 4 -> 2 -> 1: a respawn per level
    importers = log.read_text().split()
    # the first worker (forked before the function was known) and the zygote import it once
    # each; every respawned worker inherits it
    assert len(importers) <= 2, importers


def test_a_pooled_worker_imports_modules_added_to_sys_path_later(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A worker kept from an earlier batch unpickles a function whose module became importable
    only later (Spark's addPyFile grows sys.path of a running Python worker)."""
    policy = IsolationPolicy(mode="subprocess")
    batch = pd.DataFrame({"x": np.arange(10.0), "tag": "ok"})
    run_isolated(tagged_fn, batch, output_names=["y"], policy=policy)  # the worker is started
    (tmp_path / "omt_late_module.py").write_text("def triple(x):\n    return x * 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from omt_late_module import triple  # type: ignore[import-not-found]

    result = run_isolated(triple, batch[["x"]], output_names=["y"], policy=policy)
    assert result.child_starts == 0 and not result.failures
    assert result.outputs["y"].tolist() == (batch.x * 3).tolist()
