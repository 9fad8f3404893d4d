"""Bad input → a specific error, and nothing committed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID


@pytest.fixture
def t(wh: omnitable.Warehouse) -> omnitable.Table:
    table = wh.create_table(
        "t",
        pa.schema([pa.field("text", pa.string(), nullable=False), pa.field("score", pa.float64())]),
    )
    table.append(pa.table({"text": ["ok"], "score": [1.0]}), "good")
    return table


def _unchanged(t: omnitable.Table) -> None:
    assert t.version == 1
    assert [b.name for b in t.batches()] == ["good"]
    files = [
        p
        for p in t.location.fs.get_file_info(
            __import__("pyarrow.fs").fs.FileSelector(t.location.path, recursive=True)
        )
        if p.type.name == "File"
    ]
    assert len(files) == 1, [f.path for f in files]  # failed writes leave no files behind


def test_schema_mismatch(t: omnitable.Table) -> None:
    with pytest.raises(omnitable.SchemaMismatchError, match="score.*string.*double"):
        t.append(pa.table({"text": ["a"], "score": ["high"]}), "b")
    _unchanged(t)


def test_unknown_column(t: omnitable.Table) -> None:
    with pytest.raises(omnitable.UnknownColumnError, match="unknown column.*colour"):
        t.append(pa.table({"text": ["a"], "colour": ["red"]}), "b")
    _unchanged(t)


def test_missing_non_nullable_column(t: omnitable.Table) -> None:
    with pytest.raises(omnitable.SchemaMismatchError, match="non-nullable.*text"):
        t.append(pa.table({"score": [1.0]}), "b")
    with pytest.raises(omnitable.SchemaMismatchError, match="not nullable"):
        t.append(pa.table({"text": pa.array(["a", None])}), "b")
    _unchanged(t)


@pytest.mark.parametrize("ids, match", [([5, None], "null"), ([5, 5], "duplicate")])
def test_null_or_duplicate_ids(t: omnitable.Table, ids: list, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(omnitable.ValidationError, match=match):
        t.append(pa.table({ROW_ID: pa.array(ids, pa.int64()), "text": ["a", "b"]}), "b")
    _unchanged(t)


def test_duplicate_ids_across_fragments(t: omnitable.Table) -> None:
    data = pa.table({ROW_ID: [100, 101, 102, 100], "text": ["a", "b", "c", "d"]})
    with pytest.raises(omnitable.ValidationError, match="duplicate"):
        t.append(data, "b", target_fragment_rows=2)
    _unchanged(t)


def test_corrupt_parquet_input(t: omnitable.Table, tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet at all PAR1")
    with pytest.raises(omnitable.CorruptInputError, match="bad.parquet"):
        t.append(bad, "b")
    _unchanged(t)


def test_corrupt_input_after_some_fragments_were_written(
    t: omnitable.Table, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [f"r{i}" for i in range(50)]}), tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_bytes(b"garbage")
    with pytest.raises(omnitable.CorruptInputError):
        t.append(str(tmp_path / "*.parquet"), "b", target_fragment_rows=10)
    _unchanged(t)


def test_no_matching_files(t: omnitable.Table, tmp_path: Path) -> None:
    with pytest.raises(omnitable.ValidationError, match="no file matches"):
        t.append(str(tmp_path / "nothing-*.parquet"), "b")
    _unchanged(t)


def test_unsupported_data_type(t: omnitable.Table) -> None:
    with pytest.raises(omnitable.ValidationError, match="Cannot ingest data of type"):
        t.append({"text": ["a"]}, "b")
    _unchanged(t)


@pytest.mark.parametrize("name", ["", " ", "a\nb", 42, "x" * 300])
def test_bad_append_names(t: omnitable.Table, name: object) -> None:
    with pytest.raises(omnitable.ValidationError, match="append_name"):
        t.append(pa.table({"text": ["a"]}), name)  # type: ignore[arg-type]
    _unchanged(t)


@pytest.mark.parametrize(
    "name", ["a/b", "../etc", "a b", "x;DROP TABLE tables", "t'--", "a.b.c", "", "1abc", "é"]
)
def test_bad_table_names(wh: omnitable.Warehouse, name: str) -> None:
    with pytest.raises(omnitable.ValidationError, match="table name"):
        wh.create_table(name, {"x": "int"})
    assert wh.tables() == []


def test_bad_uris(tmp_path: Path) -> None:
    with pytest.raises(omnitable.ValidationError):
        omnitable.connect("mysql://localhost/x")
    with pytest.raises(omnitable.ValidationError):
        omnitable.connect(f"sqlite:///{tmp_path}/c.db", root="nosuchscheme://bucket/x")


@pytest.mark.parametrize(
    "schema, match",
    [
        ({"a": "varchar"}, "unknown type"),
        ({"a": pa.uint64()}, "uint64"),
        ({"_ai_secret": "int"}, "reserved"),
        ({"a b": "int"}, "column name"),
        ("a int", "mapping"),
    ],
)
def test_bad_schemas(wh: omnitable.Warehouse, schema: object, match: str) -> None:
    with pytest.raises(omnitable.ValidationError, match=match):
        wh.create_table("x", schema)  # type: ignore[arg-type]
    assert "x" not in wh.tables()


def test_duplicate_table(wh: omnitable.Warehouse, t: omnitable.Table) -> None:
    with pytest.raises(omnitable.AlreadyExistsError):
        wh.create_table("t", {"a": "int"})


def test_unknown_table_and_version(wh: omnitable.Warehouse, t: omnitable.Table) -> None:
    with pytest.raises(omnitable.NotFoundError, match="existing tables: t"):
        wh.table("nope")
    with pytest.raises(omnitable.NotFoundError, match="version 7"):
        t.read(version=7)
    with pytest.raises(omnitable.NotFoundError, match="batch"):
        t.read(batches=["nope"])


def test_names_with_a_trailing_newline(wh: omnitable.Warehouse) -> None:
    """``^...$`` with ``re.match`` accepts a trailing newline: every name check matches the
    whole string."""
    with pytest.raises(omnitable.ValidationError, match="table name"):
        wh.create_table("t\n", {"x": "bigint"})
    with pytest.raises(omnitable.ValidationError, match="column name"):
        wh.create_table("t", {"x\n": "bigint"})
    with pytest.raises(omnitable.ValidationError, match="column group"):
        wh.create_table("t", {"x": "bigint"}, groups={"g\n": ["x"]})
    with pytest.raises(omnitable.ValidationError, match="define feature"):
        omnitable.feature(inputs=["x"], outputs={"out": "bigint"}, version="1", name="f\n")(str)
    assert wh.tables() == []
