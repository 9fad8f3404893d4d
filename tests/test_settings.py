"""Settings (docs/settings.md): declared once, one precedence chain (argument > warehouse >
table property > default), validated table properties, a generated docs table, and the JVM's
table-property keys kept in step with OmniTableConf.scala."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable import settings
from omnitable.cli.main import main as cli_main
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.exec.runner import RunOptions
from omnitable.format.writer import WriteOptions

ROOT = Path(__file__).resolve().parents[1]


def _row_group_rows(table: omnitable.Table, batch: str) -> set[int]:
    """Rows per row group of the files of ``batch`` (the last row group of a file excluded)."""
    snap = table.snapshot()
    batch_id = next(b.batch_id for b in snap.batches if b.name == batch)
    sizes = set()
    for frag in snap.fragments:
        if frag.batch_id != batch_id:
            continue
        for f in snap.files_by_fragment[frag.fragment_id]:
            meta = pq.read_metadata(table.location.child_path(f.path))
            sizes |= {meta.row_group(i).num_rows for i in range(meta.num_row_groups - 1)}
    return sizes


def _rows(n: int) -> pa.Table:
    return pa.table({"n": pa.array(range(n), pa.int64())})


def test_each_level_of_the_chain_wins_over_the_next_for_an_append(wh: omnitable.Warehouse) -> None:
    plain = wh.create_table("plain", {"n": "bigint"})
    plain.append(_rows(300), "b")
    assert _row_group_rows(plain, "b") == set()  # default 131,072: one row group
    props = {"write.row_group_size": 40, "note": "free metadata"}
    wh.create_table("t", {"n": "bigint"}, properties=props)
    t = wh.table("t")
    t.append(_rows(300), "property")
    assert _row_group_rows(t, "property") == {40}
    with omnitable.connect(wh.uri, settings={"write.row_group_size": 30}) as wh2:
        t2 = wh2.table("t")
        t2.append(_rows(300), "warehouse")
        t2.append(_rows(300), "argument", row_group_size=20)
    with omnitable.connect(wh.uri, write_options=WriteOptions(row_group_size=25)) as wh3:
        wh3.table("t").append(_rows(300), "write_options")
    assert _row_group_rows(t, "warehouse") == {30}
    assert _row_group_rows(t, "argument") == {20}
    assert _row_group_rows(t, "write_options") == {25}
    assert t.read(columns=["n"], batches=["argument"]).column("n").to_pylist() == list(range(300))


def test_each_level_of_the_chain_wins_over_the_next_for_max_error_ratio(
    wh: omnitable.Warehouse,
) -> None:
    t = wh.create_table("t", {"n": "bigint"}, properties={"backfill.max_error_ratio": 0.2})
    props = t.record.properties
    with omnitable.connect(wh.uri, settings={"backfill.max_error_ratio": 0.3}) as wh2:
        session = wh2.settings

    def ratio(
        argument: float | None, session: dict[str, object], props: dict[str, object]
    ) -> float:
        sources = settings.Sources(session, props)
        return RunOptions.resolve(sources, max_error_ratio=argument).max_error_ratio

    assert ratio(0.4, session, props) == 0.4
    assert ratio(None, session, props) == 0.3
    assert ratio(None, {}, props) == 0.2
    assert ratio(None, {}, {}) == settings.BACKFILL_MAX_ERROR_RATIO.default == 0.01
    assert RunOptions().max_error_ratio == 0.01 and RunOptions().on_corrupt == "skip"


def test_defaults_are_the_declared_ones() -> None:
    options = WriteOptions()
    for s in settings.SETTINGS.values():
        if s.key.startswith("write."):
            assert getattr(options, s.name) == s.default, s.key
    assert options.as_settings() == {}
    assert WriteOptions(row_group_size=7).as_settings() == {"write.row_group_size": 7}


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        (
            {"write.rowgroup_size": 10},
            "Cannot create table: unknown setting 'write.rowgroup_size'; known: "
            "write.compression, write.compression_level, write.page_rows, write.row_group_bytes",
        ),
        ({"backfill.max_error_ratio": 2}, "'backfill.max_error_ratio' must be between 0 and 1"),
        ({"write.row_group_size": 0}, "'write.row_group_size' must be a positive integer"),
        ({"write.row_group_size": True}, "must be a positive integer, got True"),
        ({"backfill.on_corrupt": "ignore"}, "must be one of skip, fail, got 'ignore'"),
        ({"write.target_fragment_rows": "many"}, "must be a positive integer, got 'many'"),
        (
            {"read.batchsize": 10},
            "unknown setting 'read.batchsize'; known: read.access_log, read.batch_size",
        ),
    ],
)
def test_invalid_table_properties_fail_and_create_nothing(
    wh: omnitable.Warehouse, properties: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        wh.create_table("t", {"n": "bigint"}, properties=properties)
    assert wh.tables() == []


def test_jvm_keys_and_other_keys_are_free_table_properties(wh: omnitable.Warehouse) -> None:
    props = {"read.batch_size": 7, "owner": "team-a", "readme": "x", "write.row_group_size": "64"}
    props["write.row_group_bytes"] = "null"
    t = wh.create_table("t", {"n": "bigint"}, properties=props)
    assert wh.table("t").record.properties == props
    t.append(_rows(200), "b")  # a string property value of a Python setting is read as JSON
    assert _row_group_rows(t, "b") == {64}
    assert TableContext.of(wh, t.record).options().row_group_bytes is None
    with pytest.raises(ValidationError, match="row_group_size must be a positive integer"):
        t.append(_rows(10), "c", row_group_size="64")  # an argument is not read as JSON


def test_warehouse_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="Cannot connect: unknown setting 'write.row_groups'"):
        omnitable.connect(tmp_path / "a", settings={"write.row_groups": 1})
    with pytest.raises(ValidationError, match="Cannot connect: 'backfill.on_corrupt' must be"):
        omnitable.connect(tmp_path / "b", settings={"backfill.on_corrupt": "maybe"})
    with pytest.raises(ValidationError, match="write.row_group_size is 5 in settings and 6 in"):
        omnitable.connect(
            tmp_path / "c",
            write_options=WriteOptions(row_group_size=6),
            settings={"write.row_group_size": 5},
        )
    assert not any((tmp_path / name).exists() for name in "abc")  # nothing was created


def test_late_materialization_selectivity_follows_the_chain(tmp_path: Path) -> None:
    wh = omnitable.connect(tmp_path / "wh", write_options=WriteOptions(row_group_size=10))
    prop = {"read.late_materialization_max_selectivity": 0.5}
    groups = {"payload": ["text"]}
    t = wh.create_table("t", {"n": "bigint", "text": "string"}, groups, properties=prop)
    t.append(pa.table({"n": list(range(100)), "text": [f"t{i}" * 50 for i in range(100)]}), "b")
    where = pc.field("n") < 40  # 40 % of the rows: row groups 0-3 of 10
    with omnitable.connect(
        tmp_path / "wh", settings={"read.late_materialization_max_selectivity": 0.1}
    ) as wh2:
        eager, late = wh2.table("t").scan(["text"], where), t.scan(["text"], where)
    assert eager.table.equals(late.table)
    assert eager.stats.bytes_read > late.stats.bytes_read  # 40 % > 0.1: the whole file is read


def test_the_jvm_read_keys_match_omnitable_conf() -> None:
    (conf,) = ROOT.glob("jvm/src/main/scala/**/OmniTableConf.scala")
    declared = re.findall(r'"spark\.omnitable\.(read\.[a-z_]+)"', conf.read_text())
    assert declared, "no spark.omnitable.read.* key found in OmniTableConf.scala"
    assert sorted(settings.JVM_READ_KEYS) == sorted(declared)
    assert not set(settings.JVM_READ_KEYS) & set(settings.SETTINGS)


def test_docs_settings_table_is_generated() -> None:
    page = (ROOT / "docs/settings.md").read_text(encoding="utf-8")
    assert page == settings.with_markdown(page), (
        "docs/settings.md is out of date: run `omnitable settings --markdown docs/settings.md`"
    )


def test_cli_writes_the_docs_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# S\n\n{settings.DOC_BEGIN}\nold\n{settings.DOC_END}\n\nmore\n")
    assert cli_main(["settings", "--markdown", str(page)]) == 0
    assert page.read_text() == f"# S\n\n{settings.DOC_BEGIN}\n{settings.markdown()}" + (
        f"{settings.DOC_END}\n\nmore\n"
    )
    assert cli_main(["settings", "--markdown"]) == 0
    assert capsys.readouterr().out == settings.markdown()
    page.write_text("no markers")
    assert cli_main(["settings", "--markdown", str(page)]) == 2


def test_the_jvm_create_table_check_knows_every_python_setting() -> None:
    """CREATE TABLE from Spark checks table properties with a copy of Python's rules
    (TableDefinition.scala, PropertyCheck): the same keys."""
    (source,) = ROOT.glob("jvm/src/main/scala/**/TableDefinition.scala")
    declared = re.findall(
        r'^\s*"((?:read|write|backfill|table|governance)\.[a-z_]+)" -> ', source.read_text(), re.M
    )
    assert sorted(declared) == sorted(settings.SETTINGS)
