"""What a Spark Python worker imports to run a backfill task: the task module and the pandas
feature's module, not the catalog (SQLAlchemy), the data operations or the rest of the facade
(``omnitable/__init__`` re-exports lazily), which every worker process would pay for at its
first task (the work-queue benchmark's start-up, docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import omnitable

CHECK = """
import json, sys
import omnitable.exec.task
import omt_queue_features
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("omnitable", "sqlalchemy")))))
"""


def test_a_task_imports_neither_the_catalog_nor_the_facade() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         check=True, env=env).stdout  # fmt: skip
    loaded = json.loads(out)
    assert "omnitable.exec.task" in loaded and "omnitable.features.definition" in loaded
    for heavy in ("sqlalchemy", "omnitable.catalog.catalog", "omnitable.table",
                  "omnitable.warehouse", "omnitable.dataops.delete", "omnitable.models.store"):  # fmt: skip
        assert heavy not in loaded, heavy


def test_the_facade_still_resolves_every_public_name() -> None:
    assert all(getattr(omnitable, name) is not None for name in omnitable.__all__)
    assert omnitable.connect.__module__ == "omnitable.warehouse"
    try:
        omnitable.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
