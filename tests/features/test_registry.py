from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable.features.definition import Feature

from . import omt_test_features as F


@pytest.fixture
def docs(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("docs", {"text": "string", "lang": "string"})
    t.append(pa.table({"text": ["  Hello World ", "Foo 42"], "lang": ["en", "en"]}), "b1")
    return t


def test_register_adds_output_columns_and_versions(docs: omnitable.Table) -> None:
    v = docs.register(F.clean, F.n_chars, F.words)
    assert v == docs.version
    names = [f.name for f in docs.features()]
    assert sorted(names) == ["clean", "n_chars", "words"]
    assert docs.schema.names[-4:] == ["clean", "n_chars", "n_words", "has_digit"]
    assert docs.read(columns=["clean"]).column("clean").null_count == 2  # not computed yet
    snap = docs.snapshot(with_files=False)
    assert {c.name: c.group_name for c in snap.columns if c.feature} == {
        "clean": "clean",
        "n_chars": "n_chars",
        "n_words": "words",
        "has_digit": "words",
    }
    assert docs.register(F.clean, F.n_chars) is None  # idempotent


def test_unknown_inputs_clashes_and_cycles(docs: omnitable.Table) -> None:
    with pytest.raises(omnitable.ValidationError, match="input 'clean' is neither"):
        docs.register(F.n_chars)
    with pytest.raises(omnitable.ValidationError, match="clashes with an existing raw column"):
        docs.register(omnitable.sql_feature("lang", "upper(text)", "string", "1"))
    a = omnitable.sql_feature("a_col", "b_col || 'x'", "string", "1", inputs=["b_col"])
    b = omnitable.sql_feature("b_col", "a_col || 'y'", "string", "1", inputs=["a_col"])
    with pytest.raises(omnitable.ValidationError, match="dependency cycle"):
        docs.register(a, b)
    docs.register(F.clean)
    dup = omnitable.sql_feature("clean2", "lower(text)", "string", "1")
    dup = Feature(
        dup.name,
        dup.inputs,
        {"clean": "string"},
        "1",
        "sql",
        expr=dup.expr,
        code_fingerprint=dup.code_fingerprint,
    )
    with pytest.raises(omnitable.ValidationError, match="already produced by feature 'clean'"):
        docs.register(dup)
    assert sorted(f.name for f in docs.features()) == ["clean"]


MODULE = """
import omnitable

@omnitable.feature(inputs=["text"], outputs={{"clean": "string"}}, version="{version}")
def clean(text):
    return {body}
"""


def test_changed_code_under_same_version_is_refused(
    docs: omnitable.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "user_feats_v.py"

    def load(version: str, body: str) -> Feature:
        module.write_text(MODULE.format(version=version, body=body))
        sys.modules.pop("user_feats_v", None)
        return importlib.import_module("user_feats_v").clean

    docs.register(load("1", "text.str.lower()"))
    with pytest.raises(omnitable.ValidationError, match='bump the version .*version="2"'):
        docs.register(load("1", "text.str.upper()"))
    docs.register(load("2", "text.str.upper()"))  # a new version is fine
    assert {f.name: f.version for f in docs.features()} == {"clean": "2"}
    docs.register(load("1", "text.str.lower()"))  # the old version again becomes current
    assert {f.name: f.version for f in docs.features()} == {"clean": "1"}


def test_per_record_toggled_under_same_version_is_refused(docs: omnitable.Table) -> None:
    """The same function called record by record takes other arguments: a new version."""
    from . import omt_faulty_features as faulty

    docs.register(faulty.score_each)
    vectorized = omnitable.feature(
        inputs=["text"], outputs={"score": "double"}, version="1", name="score"
    )(faulty._score_one)
    with pytest.raises(omnitable.ValidationError, match="bump the version"):
        docs.register(vectorized)


def test_non_importable_functions_are_stored_pickled(docs: omnitable.Table) -> None:
    # more in test_pickled_features.py
    def local(text):  # type: ignore[no-untyped-def]
        return text

    f = omnitable.feature(inputs=["text"], outputs={"same": "string"}, version="1")(local)
    docs.register(f)
    (stored,) = docs.features()
    assert stored.payload is not None and stored.code_fingerprint == stored.payload["fingerprint"]


def test_sql_feature_inputs_are_inferred(docs: omnitable.Table) -> None:
    f = omnitable.sql_feature("is_en", "lang = 'text' AND length(text) > 3", "boolean", "1")
    docs.register(f)
    (stored,) = docs.features()
    assert stored.inputs == ("lang", "text")
    with pytest.raises(omnitable.ValidationError, match="mentions no column"):
        docs.register(omnitable.sql_feature("k", "42", "int", "1"))


def test_sql_feature_inputs_resolve_identifiers_like_spark(docs: omnitable.Table) -> None:
    # Spark resolves identifiers case-insensitively by default, quoted or not
    docs.register(F.clean, F.words)
    f = omnitable.sql_feature("x", "length(TEXT) + N_WORDS + length(`Lang`)", "int", "1")
    docs.register(f)
    (stored,) = [g for g in docs.features() if g.name == "x"]
    assert stored.inputs == ("text", "n_words", "lang")  # the columns' own names, in order
    plan = docs.backfill("x")
    assert [g.name for s in plan.steps for g in s.features] == ["clean", "words", "x"]


@pytest.mark.spark
def test_sql_feature_inputs_honour_spark_case_sensitivity(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    spark.createDataFrame([(1,)], "x int")  # makes `spark` the active session (pyspark)
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        with pytest.raises(omnitable.ValidationError, match="mentions no column"):
            docs.register(omnitable.sql_feature("y", "length(TEXT)", "int", "1"))
        docs.register(omnitable.sql_feature("y", "length(TEXT) + length(text)", "int", "1"))
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    (stored,) = docs.features()
    assert stored.inputs == ("text",)


@pytest.mark.spark
def test_sql_feature_case_sensitivity_seen_from_another_thread(
    docs: omnitable.Table, spark
) -> None:  # type: ignore[no-untyped-def]
    # a thread other than the session's builder has no JVM-side active session: the registry
    # must still read the session's conf (the default session), not fall back to Spark's default
    spark.conf.set("spark.sql.caseSensitive", "true")
    errors: list[BaseException] = []

    def register() -> None:
        try:
            docs.register(omnitable.sql_feature("y", "length(TEXT)", "int", "1"))
        except BaseException as e:
            errors.append(e)

    try:
        worker = threading.Thread(target=register)
        worker.start()
        worker.join()
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    assert len(errors) == 1 and isinstance(errors[0], omnitable.ValidationError), errors
    assert "mentions no column" in str(errors[0])
    assert docs.features() == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"inputs": "text", "outputs": {"x": "int"}, "version": "1"}, "inputs must be"),
        ({"inputs": ["text"], "outputs": {}, "version": "1"}, "outputs must be"),
        ({"inputs": ["text"], "outputs": {"x": "int"}, "version": ""}, "version must be"),
        ({"inputs": ["text"], "outputs": {"x": "nope"}, "version": "1"}, "unknown type"),
        ({"inputs": ["text"], "outputs": {"x": "int"}, "version": "1", "prefer": "tpu"}, "prefer"),
    ],
)
def test_bad_definitions(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(omnitable.ValidationError, match=match):
        omnitable.feature(**kwargs)(F._clean_v2)


def test_output_type_change_replaces_the_column(docs: omnitable.Table) -> None:
    docs.register(omnitable.sql_feature("len_t", "length(text)", "int", "1"))
    docs.register(omnitable.sql_feature("len_t", "length(text)", "bigint", "2"))
    assert docs.schema.field("len_t").type == pa.int64()
