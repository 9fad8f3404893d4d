"""``Table.export_delta`` and ``Table.export_iceberg`` on SQLite and PostgreSQL warehouses: the
target equals the table at each exported version (append, delete, update, new column between
exports), a re-run does nothing, a crash is resumable or leaves the target, bad targets fail
clearly; the Delta target read back with delta-spark and the Iceberg target with Spark's Iceberg
runtime."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import ValidationError

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg.catalog.sql")
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402

_names = itertools.count()


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(f"e{next(_names)}", {"x": "bigint", "score": "double", "s": "string"})
    _append(t, 0, 90, "b1")
    return t


def _append(t: omnitable.Table, start: int, n: int, name: str) -> None:
    xs = list(range(start, start + n))
    data = pa.table({"x": xs, "score": [x / 10 for x in xs], "s": [f"s{x}" for x in xs]})
    t.append(data, name, target_fragment_rows=30)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.sort_by(ROW_ID).to_pylist()


def _changes(t: omnitable.Table) -> Any:
    """Append, delete, update, add a column: yields after each (the version to compare)."""
    _append(t, 90, 40, "b2")
    yield "append"
    t.delete(pc.field("x") < 10)
    yield "delete"
    ids = t.read([ROW_ID], where=pc.field("x") == 50).column(0)
    t.update(pa.table({ROW_ID: ids, "score": [-1.0]}), columns=["score"])
    yield "update"
    t.add_columns(pa.table({ROW_ID: ids, "extra": [7]}))
    yield "new column"


def test_delta_equals_the_table_at_each_version(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    t = _table(wh)
    target = str(tmp_path / "delta")
    first = t.export_delta(target)
    assert (first.mode, first.rows_written) == ("full", 90)
    assert _rows(deltalake.DeltaTable(target).to_pyarrow_table()) == _rows(t.read())
    modes = []
    for _ in _changes(t):
        result = t.export_delta(target)
        modes.append((result.mode, result.rows_written, result.rows_deleted))
        got = deltalake.DeltaTable(target)
        assert _rows(got.to_pyarrow_table()) == _rows(t.read()), result
        assert got.transaction_version(f"omnitable:{t.record.table_id}") == t.version
        again = t.export_delta(target)  # exactly once
        assert (again.mode, again.rows_written) == ("unchanged", 0)
        assert deltalake.DeltaTable(target).version() == got.version()
    # appended 40 rows only; the delete and the update rewrote one fragment each; the new
    # column rewrote everything
    assert modes == [("incremental", 40, 0), ("incremental", 20, 30),
                     ("incremental", 30, 30), ("full", 120, 0)]  # fmt: skip
    assert deltalake.DeltaTable(target).metadata().configuration["omnitable.table_id"] == (
        t.record.table_id
    )


def test_delta_pinned_versions_and_bad_targets(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    t = _table(wh)
    v1 = t.version
    _append(t, 90, 10, "b2")
    target = str(tmp_path / "delta")
    assert t.export_delta(target, version=v1).rows_written == 90
    assert t.export_delta(target).rows_written == 10
    assert _rows(deltalake.DeltaTable(target).to_pyarrow_table()) == _rows(t.read())
    with pytest.raises(ValidationError, match=f"already holds the newer version {t.version}"):
        t.export_delta(target, version=v1)
    other = _table(wh)
    with pytest.raises(ValidationError, match="already holds table id"):
        other.export_delta(target)
    foreign = str(tmp_path / "foreign")
    deltalake.write_deltalake(foreign, pa.table({"a": [1]}))
    with pytest.raises(ValidationError, match="not written by OmniTable"):
        t.export_delta(foreign)
    with pytest.raises(ValidationError, match="path must be"):
        t.export_delta("")


def test_delta_crash_between_delete_and_append_is_resumable(
    wh: omnitable.Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(wh)
    target = str(tmp_path / "delta")
    t.export_delta(target)
    t.delete(pc.field("x") == 3)
    real = deltalake.write_deltalake

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("driver died after the delete commit")

    monkeypatch.setattr(deltalake, "write_deltalake", crash)
    with pytest.raises(OSError, match="driver died"):
        t.export_delta(target)
    monkeypatch.setattr(deltalake, "write_deltalake", real)
    result = t.export_delta(target)
    assert result.mode == "incremental"
    assert _rows(deltalake.DeltaTable(target).to_pyarrow_table()) == _rows(t.read())


def _iceberg_rows(uri: str, warehouse: str, name: str) -> tuple[list[dict[str, Any]], Any]:
    """The rows of Iceberg table ``name`` and its current snapshot's summary."""
    catalog = SqlCatalog("omnitable", uri=uri, warehouse=warehouse)
    try:
        ice = catalog.load_table(name)
        snapshot = ice.current_snapshot()
        return _rows(ice.scan().to_arrow()), None if snapshot is None else snapshot.summary
    finally:
        catalog.engine.dispose()


def test_iceberg_equals_the_table_at_each_version(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], tmp_path: Path
) -> None:
    """On PostgreSQL the Iceberg catalog is the warehouse's own database (catalog_uri None)."""
    t = _table(wh)
    postgres = catalog_spec[0].startswith("postgres")
    uri = None if postgres else f"sqlite:///{tmp_path / 'iceberg.db'}"
    data = str(tmp_path / "ice")
    name = f"exports.{t.name}"
    assert t.export_iceberg(uri, name, warehouse=data).rows_written == 90
    catalog_uri = (
        wh.address.connect_url().render_as_string(hide_password=False) if postgres else uri
    )
    assert _iceberg_rows(catalog_uri, data, name)[0] == _rows(t.read())  # type: ignore[arg-type]
    for step in _changes(t):
        result = t.export_iceberg(uri, name, warehouse=data)
        assert result.mode == ("full" if step == "new column" else "incremental"), step
        rows, summary = _iceberg_rows(catalog_uri, data, name)  # type: ignore[arg-type]
        assert rows == _rows(t.read()), step
        assert summary["omnitable.version"] == str(t.version)
        assert t.export_iceberg(uri, name, warehouse=data).mode == "unchanged"
    with pytest.raises(ValidationError, match="already holds table id"):
        _table(wh).export_iceberg(uri, name, warehouse=data)


def test_iceberg_failed_export_leaves_the_target(
    wh: omnitable.Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(wh)
    uri, data, name = f"sqlite:///{tmp_path / 'i.db'}", str(tmp_path / "ice"), "ns.t"
    t.export_iceberg(uri, name, warehouse=data)
    before = _iceberg_rows(uri, data, name)[0]
    t.delete(pc.field("x") == 3)
    _append(t, 90, 5, "b2")
    from omnitable.training import export as export_mod

    real = export_mod.FragmentReader.read_fragment
    calls = []

    def crash(self: Any, *args: Any, **kwargs: Any) -> pa.Table:
        calls.append(1)
        if len(calls) > 2:  # after the delete is staged, while appending
            raise OSError("disk died")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(export_mod.FragmentReader, "read_fragment", crash)
    with pytest.raises(OSError, match="disk died"):
        t.export_iceberg(uri, name, warehouse=data)
    monkeypatch.undo()
    assert _iceberg_rows(uri, data, name)[0] == before
    assert t.export_iceberg(uri, name, warehouse=data).mode == "incremental"
    assert _iceberg_rows(uri, data, name)[0] == _rows(t.read())


@pytest.mark.parametrize("catalog_spec", ["sqlite"], indirect=True)
def test_iceberg_bad_input(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    t = _table(wh)
    with pytest.raises(ValidationError, match="only a PostgreSQL warehouse"):
        t.export_iceberg(None, "ns.t")
    with pytest.raises(ValidationError, match="'namespace.table'"):
        t.export_iceberg(f"sqlite:///{tmp_path / 'i.db'}", "t")
    with pytest.raises(ValidationError, match="SQLAlchemy URL"):
        t.export_iceberg("nope", "ns.t")


@pytest.mark.slow  # a Spark session and delta-spark's first read: minutes on 2 loaded cores
@pytest.mark.parametrize("catalog_spec", ["sqlite"], indirect=True)
def test_delta_spark_reads_the_export(wh: omnitable.Warehouse, tmp_path: Path, spark: Any) -> None:
    t = _table(wh)
    target = str(tmp_path / "delta")
    t.export_delta(target)
    t.delete(pc.field("x") < 5)
    _append(t, 90, 5, "b2")
    t.export_delta(target)
    got = spark.read.format("delta").load(target).toPandas()
    expected = t.read().to_pandas()
    key = ROW_ID
    assert got.sort_values(key).reset_index(drop=True).to_dict("records") == (
        expected.sort_values(key).reset_index(drop=True).to_dict("records")
    )
    assert np.all(got.columns == expected.columns)


@pytest.mark.slow  # the shared Spark session and the Iceberg runtime's first read
@pytest.mark.parametrize("catalog_spec", ["sqlite"], indirect=True)
def test_spark_iceberg_runtime_reads_the_export_at_each_version(
    wh: omnitable.Warehouse, tmp_path: Path, spark: Any
) -> None:
    """Spark with the Iceberg runtime (no Iceberg catalog configured: the table is loaded from
    the metadata file pyiceberg's catalog points at) sees what ``read()`` sees after every
    incremental export: appended rows, deleted rows, an updated value, a new column."""
    if not list((Path(__file__).parents[1] / "jars").glob("iceberg-spark-runtime*.jar")):
        pytest.fail("the Iceberg Spark runtime is missing: run scripts/fetch-jars.sh --test")
    t = _table(wh)
    uri, data, name = f"sqlite:///{tmp_path / 'i.db'}", str(tmp_path / "ice"), "ns.t"
    catalog = SqlCatalog("omnitable", uri=uri, warehouse=data)  # the export's catalog name
    try:
        t.export_iceberg(uri, name, warehouse=data)
        for step in itertools.chain(["first"], _changes(t)):
            if step != "first":
                t.export_iceberg(uri, name, warehouse=data)
            location = catalog.load_table(name).metadata_location
            got = spark.read.format("iceberg").load(location).toPandas()
            expected = t.read().to_pandas()
            assert list(got.columns) == list(expected.columns), step
            pd.testing.assert_frame_equal(
                got.sort_values(ROW_ID).reset_index(drop=True),
                expected.sort_values(ROW_ID).reset_index(drop=True),
                obj=step,
            )
    finally:
        catalog.engine.dispose()
