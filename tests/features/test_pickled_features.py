"""Features defined where users write them (a script's ``__main__``, a closure, a lambda) are
stored pickled in the table directory and run in other processes (docs/features.md, "Features
defined in notebooks and scripts")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable.features.definition import Feature

from . import omt_test_features as F

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"

SCRIPT = textwrap.dedent(
    """
    import sys

    import pandas as pd
    import pyarrow as pa

    import omnitable
    from omt_pickled_helper import helper  # a local module next to the script

    BONUS = 10


    @omnitable.feature(inputs=["text"], outputs={"score": "bigint"}, version="1")
    def score(text: pd.Series) -> pd.Series:
        return text.str.len().map(helper) + BONUS


    def make(suffix):
        def shout(text):
            return text.str.upper() + suffix

        return shout


    shout = omnitable.feature(inputs=["text"], outputs={"shout": "string"}, version="1")(
        make("!")
    )
    squared = omnitable.feature(
        inputs=["text"], outputs={"squared": "bigint"}, version="1", name="squared"
    )(lambda text: text.str.len() ** 2)

    if __name__ == "__main__":
        uri, root = sys.argv[1], sys.argv[2] or None
        with omnitable.connect(uri, root=root) as wh:
            if "docs" not in wh.tables():
                t = wh.create_table("docs", {"text": "string"})
                t.append(pa.table({"text": ["a", "bb", "ccc"]}), "b1")
            print("registered", wh.table("docs").register(score, shout, squared))
    """
)


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, PYSPARK_PYTHON=sys.executable)


def _define(tmp_path: Path, catalog_spec: tuple[str, str | None], prefix: str = "") -> str:
    """Run the defining script (after ``prefix``) as its own process; its stdout."""
    script = tmp_path / "define_features.py"
    script.write_text(prefix + SCRIPT)
    (tmp_path / "omt_pickled_helper.py").write_text("def helper(n):\n    return n * 2\n")
    uri, root = catalog_spec
    done = subprocess.run(
        [sys.executable, str(script), uri, root or ""],
        capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _definitions(wh: omnitable.Warehouse) -> dict[str, dict[str, Any]]:
    with wh.catalog.store.read() as conn:
        rows = conn.execute(text("SELECT name, definition FROM features")).all()
    return {name: json.loads(d) for name, d in rows}


def _set_payload(wh: omnitable.Warehouse, name: str, payload: dict[str, Any]) -> None:
    """Replace the recorded payload metadata of feature ``name`` in the catalog (as another
    environment would have recorded it)."""
    d = _definitions(wh)[name]
    d["payload"] = payload
    with wh.catalog.store.write() as conn:
        conn.execute(
            text("UPDATE features SET definition = :d WHERE name = :n"),
            {"d": json.dumps(d), "n": name},
        )


@pytest.mark.spark
def test_script_main_features_register_and_backfill_through_the_cli(
    tmp_path: Path, catalog_spec: tuple[str, str | None]
) -> None:
    assert "registered 2" in _define(tmp_path, catalog_spec)
    assert "registered None" in _define(tmp_path, catalog_spec)  # same code: nothing changes
    uri, root = catalog_spec
    with omnitable.connect(uri, root=root) as wh:
        defs = _definitions(wh)
        table_dir = Path(wh.table("docs").location.path)
    for name in ("score", "shout", "squared"):
        meta = defs[name]["payload"]
        assert (table_dir / meta["path"]).is_file()
        assert meta["path"] == f"_features/{meta['sha256']}.pkl"
        assert {"pandas", "pyarrow", "numpy", "omnitable", "pyspark"} <= set(meta["packages"])
    assert defs["score"]["ref"] == "__main__:score"
    assert defs["score"]["payload"]["modules"] == ["omt_pickled_helper"]
    cli = [sys.executable, "-m", "omnitable.cli.main", "-w", uri, "backfill", "docs"]
    done = subprocess.run(
        # --path: the CLI imports the helper module; Spark ships it to the Python workers
        [*cli, "-f", "score,shout,squared", "--master", "local[1]", "--path", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    with omnitable.connect(uri, root=root) as wh:
        got = wh.table("docs").read(columns=["text", "score", "shout", "squared"]).to_pydict()
    assert got == {
        "text": ["a", "bb", "ccc"],
        "score": [12, 14, 16],
        "shout": ["A!", "BB!", "CCC!"],
        "squared": [1, 4, 9],
    }


def test_the_same_code_in_another_file_and_line_is_the_same_version(
    tmp_path: Path, catalog_spec: tuple[str, str | None]
) -> None:
    # like a notebook cell re-run in a new kernel, with other cells above it
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    assert "registered 2" in _define(first, catalog_spec)
    assert "registered None" in _define(second, catalog_spec, prefix="# a new cell\n\n\n")
    changed = "# BONUS changed below\n" + SCRIPT.replace("BONUS = 10", "BONUS = 11")
    script = second / "define_features.py"
    script.write_text(changed)
    uri, root = catalog_spec
    done = subprocess.run(
        [sys.executable, str(script), uri, root or ""],
        capture_output=True, text=True, timeout=300, env=_env(), cwd=second,
    )  # fmt: skip
    assert done.returncode != 0 and "bump the version" in done.stderr


RUN_BACKFILL = textwrap.dedent(
    """
    import sys

    import omnitable
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    with omnitable.connect(sys.argv[1]) as wh:
        print("committed", wh.table("docs").backfill(["score"]).run(spark).versions)
    """
)


@pytest.mark.spark
def test_a_spark_submit_job_runs_a_feature_defined_in_a_script(tmp_path: Path) -> None:
    from omnitable.spark.submit_args import submit_args

    wh = str(tmp_path / "wh")
    assert "registered 2" in _define(tmp_path, (wh, None))
    job = tmp_path / "jobs" / "run_backfill.py"  # another directory: nothing of the script
    job.parent.mkdir()
    job.write_text(RUN_BACKFILL)
    submit = Path(sys.executable).with_name("spark-submit")
    helper = str(tmp_path / "omt_pickled_helper.py")  # the script's local module, as a job ships it
    cmd = [
        str(submit),
        *submit_args(wh),
        "--master",
        "local[1]",
        "--py-files",
        helper,
        str(job),
        wh,
    ]
    done = subprocess.run(
        [*cmd[:-2], "--conf", "spark.ui.enabled=false", *cmd[-2:]],
        capture_output=True, text=True, timeout=600, env=_env(), cwd=job.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    assert "committed [3]" in done.stdout
    with omnitable.connect(wh) as w:
        assert w.table("docs").read(columns=["score"]).column("score").to_pylist() == [12, 14, 16]


@pytest.fixture
def docs(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": ["a", "bb", "ccc", None]}), "b1")
    return t


def _closure_features(offset: int) -> tuple[Feature, Feature]:
    def shifted(text: pd.Series) -> pd.Series:
        return text.str.len() + offset

    plus = omnitable.feature(inputs=["text"], outputs={"plus": "double"}, version="1", name="plus")(
        shifted
    )
    twice = omnitable.feature(
        inputs=["plus"], outputs={"twice": "double"}, version="1", name="twice"
    )(lambda plus: plus * 2)
    return plus, twice


@pytest.mark.spark
def test_closure_and_lambda_run_on_spark_executors(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    plus, twice = _closure_features(100)
    docs.register(plus, twice)
    stored = {f.name: f for f in docs.features()}
    assert stored["plus"].payload is not None and stored["twice"].payload is not None
    result = docs.backfill(["twice"]).run(spark)
    assert len(result.versions) == 2
    got = docs.read(columns=["plus", "twice"]).to_pydict()
    assert got == {"plus": [101.0, 102.0, 103.0, None], "twice": [202.0, 204.0, 206.0, None]}


def test_importable_features_stay_references(docs: omnitable.Table) -> None:
    docs.register(F.clean)
    (stored,) = docs.features()
    assert stored.payload is None and stored.ref == f"{F.__name__}:clean"
    assert not (Path(docs.location.path) / "_features").exists()


def test_a_changed_closure_is_new_code(docs: omnitable.Table) -> None:
    docs.register(_closure_features(1)[0])
    assert docs.register(_closure_features(1)[0]) is None  # the same code and values
    with pytest.raises(omnitable.ValidationError, match="bump the version"):
        docs.register(_closure_features(2)[0])  # another captured value: another function


def test_unpicklable_functions_are_refused(docs: omnitable.Table) -> None:
    import threading

    lock = threading.Lock()

    def locked(text: pd.Series) -> pd.Series:
        with lock:
            return text

    f = omnitable.feature(inputs=["text"], outputs={"same": "string"}, version="1")(locked)
    with pytest.raises(omnitable.ValidationError, match="cannot be pickled"):
        docs.register(f)
    assert docs.features() == []


@pytest.mark.spark
def test_a_tampered_or_missing_payload_is_a_clear_error(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    plus, _ = _closure_features(5)
    docs.register(plus)
    (stored,) = docs.features()
    assert stored.payload is not None
    path = Path(docs.location.path) / stored.payload["path"]
    original = path.read_bytes()
    path.write_bytes(original[:-1] + b"\x00")
    with pytest.raises(omnitable.ValidationError, match="pickled code .* was modified"):
        docs.backfill(["plus"]).run(spark)
    assert plus.fn is not None
    plus2 = omnitable.feature(
        inputs=["text"], outputs={"plus": "double"}, version="2", name="plus"
    )(plus.fn)
    docs.register(plus2)  # a new version of the same code: the same file, written again
    assert path.read_bytes() == original
    docs.register(plus)  # version 1 current again
    path.unlink()
    with pytest.raises(omnitable.ValidationError, match="pickled code .* is missing"):
        docs.backfill(["plus"]).run(spark)
    assert docs.read(columns=["plus"]).column("plus").null_count == 4  # nothing ran
    assert docs.register(_closure_features(5)[0]) is None  # the same code: writes it again
    assert path.read_bytes() == original
    docs.backfill(["plus"]).run(spark)
    assert docs.read(columns=["plus"]).column("plus").to_pylist() == [6.0, 7.0, 8.0, None]


@pytest.mark.spark
def test_an_environment_mismatch_is_refused_unless_drift_is_allowed(
    docs: omnitable.Table, spark
) -> None:  # type: ignore[no-untyped-def]
    docs.register(_closure_features(5)[0])
    wh = docs.warehouse
    recorded = _definitions(wh)["plus"]["payload"]
    drifted = {**recorded, "packages": {**recorded["packages"], "pandas": "1.0.5"}}
    _set_payload(wh, "plus", drifted)
    with pytest.raises(omnitable.ValidationError, match=r"pandas==1\.0\.5 \(here .*allow_version"):
        docs.backfill(["plus"]).run(spark)
    for other, message in [
        ({**drifted, "python": "2.7.18"}, r"not compatible .*Python 2\.7\.18 \(here 3\."),
        (
            {**drifted, "packages": {**drifted["packages"], "no-such-dist": "1.0"}},
            r"not compatible .*no-such-dist==1\.0 \(not installed here\)",
        ),
    ]:
        _set_payload(wh, "plus", other)
        with pytest.raises(omnitable.ValidationError, match=message):
            docs.backfill(["plus"]).run(spark, allow_version_drift=True)
    assert docs.read(columns=["plus"]).column("plus").null_count == 4  # nothing ran
    _set_payload(wh, "plus", drifted)
    docs.backfill(["plus"]).run(spark, allow_version_drift=True)  # pandas 1.0.5 recorded
    assert docs.read(columns=["plus"]).column("plus").to_pylist() == [6.0, 7.0, 8.0, None]


@pytest.mark.spark
def test_the_cli_runs_a_drifted_feature_only_when_allowed(
    docs: omnitable.Table,
    catalog_spec: tuple[str, str | None],
    capsys: pytest.CaptureFixture[str],
    spark,  # type: ignore[no-untyped-def]
) -> None:
    from omnitable.cli.main import main

    docs.register(_closure_features(5)[0])
    recorded = _definitions(docs.warehouse)["plus"]["payload"]
    pandas = {**recorded["packages"], "pandas": "1.0.5"}
    _set_payload(docs.warehouse, "plus", {**recorded, "packages": pandas})
    cli = ["-w", catalog_spec[0], "backfill", "docs", "-f", "plus"]
    assert main(cli) != 0
    err = capsys.readouterr().err
    assert "pandas==1.0.5" in err and "--allow-version-drift" in err
    assert docs.read(columns=["plus"]).column("plus").null_count == 4
    assert main([*cli, "--allow-version-drift"]) == 0, capsys.readouterr().err
    assert docs.read(columns=["plus"]).column("plus").to_pylist() == [6.0, 7.0, 8.0, None]
