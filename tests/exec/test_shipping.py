"""Shipping feature modules to the executors (exec/shipping.py) from several threads at once:
two runs starting together (queue workers in one process) ship a module once, and never run
pyspark's ``addPyFile`` (and its ``importlib.invalidate_caches``, which raises KeyError when two
threads run it together) concurrently."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from omnitable.exec import shipping

pytestmark = pytest.mark.spark


def test_concurrent_runs_ship_a_module_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ship_me_once.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls: list[str] = []
    inside = threading.Semaphore(0)
    real = spark.addArtifacts

    def slow_add(*paths: str, **kwargs: Any) -> None:
        calls.append(paths[0])
        inside.release()
        time.sleep(0.3)  # the other thread starts meanwhile: it must wait, not ship again
        real(*paths, **kwargs)

    monkeypatch.setattr(spark, "addArtifacts", slow_add)
    errors: list[BaseException] = []

    def ship() -> None:
        try:
            shipping.ship_modules(spark, ["ship_me_once"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ship) for _ in range(2)]
    threads[0].start()
    assert inside.acquire(timeout=60)  # the first thread is inside addArtifacts
    threads[1].start()
    for th in threads:
        th.join()
    assert not errors and calls == [str(tmp_path / "ship_me_once.py")]
    sys.modules.pop("ship_me_once", None)
