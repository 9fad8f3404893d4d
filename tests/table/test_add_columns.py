from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID


@pytest.fixture
def base(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("b", {"text": "string"})
    t.append(pa.table({"text": [f"r{i}" for i in range(30)]}), "b1", target_fragment_rows=10)
    t.append(pa.table({"text": [f"s{i}" for i in range(5)]}), "b2")
    return t


def _files(t: omnitable.Table) -> dict[str, str]:
    import pyarrow.fs as pafs

    infos = t.location.fs.get_file_info(pafs.FileSelector(t.location.path, recursive=True))
    out = {}
    for info in infos:
        if info.type == pafs.FileType.File:
            with t.location.fs.open_input_stream(info.path) as f:
                out[info.path] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_add_columns_writes_only_new_files_and_nulls_for_uncovered_rows(
    base: omnitable.Table,
) -> None:
    before = _files(base)
    ids = base.read(columns=[ROW_ID], batches=["b1"]).column(ROW_ID).to_pylist()
    some = ids[::2]
    base.add_columns(
        pa.table(
            {ROW_ID: some, "quality": [float(i) for i in some], "label": [str(i) for i in some]}
        )
    )
    after = _files(base)
    assert {p: after[p] for p in before} == before  # immutability: nothing rewritten
    new = set(after) - set(before)
    assert len(new) == 3  # one new file per touched fragment of b1, none for b2
    out = base.read(columns=[ROW_ID, "quality", "label"])
    got = {r[ROW_ID]: r["quality"] for r in out.to_pylist()}
    assert all(got[i] == float(i) for i in some)
    assert all(got[i] is None for i in got if i not in some)
    assert base.schema.names[-2:] == ["quality", "label"]


def test_bytes_written_are_the_new_column_only(base: omnitable.Table) -> None:
    before = _files(base)
    ids = base.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()
    base.add_columns(pa.table({ROW_ID: ids, "flag": [True] * len(ids)}), group="flags")
    snap = base.snapshot()
    new_files = [f for fs in snap.files_by_fragment.values() for f in fs if f.group_name == "flags"]
    assert len(new_files) == len(snap.fragments)
    assert len(_files(base)) == len(before) + len(new_files)
    assert all(len(f.columns) == 1 for f in new_files)


@pytest.mark.parametrize(
    "data, match",
    [
        (pa.table({"x": [1]}), "needs a _ai_unique_id_"),
        (pa.table({ROW_ID: [0]}), "no new column"),
        (pa.table({ROW_ID: [0, 0], "x": [1, 2]}), "duplicate"),
        (pa.table({ROW_ID: pa.array([0, None], pa.int64()), "x": [1, 2]}), "null"),
        (pa.table({ROW_ID: [0, 123456], "x": [1, 2]}), "match no row.*123456"),
        (pa.table({ROW_ID: [0], "text": ["dup"]}), "already exists"),
        (pa.table({ROW_ID: [0], "_ai_append_name_": ["x"]}), "system column"),
    ],
)
def test_bad_add_columns_commit_nothing(base: omnitable.Table, data: pa.Table, match: str) -> None:
    before = _files(base)
    version = base.version
    with pytest.raises(omnitable.OmniTableError, match=match):
        base.add_columns(data)
    assert base.version == version
    assert _files(base) == before


def test_group_rules(base: omnitable.Table) -> None:
    ids = base.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()
    with pytest.raises(omnitable.ValidationError, match="already holds columns"):
        base.add_columns(pa.table({ROW_ID: ids, "x": ids}), group="base")
    with pytest.raises(omnitable.ValidationError, match="group names"):
        base.add_columns(pa.table({ROW_ID: ids, "x": ids}), group="../evil")
    base.add_columns(pa.table({ROW_ID: ids, "x": ids}))
    assert {c.group_name for c in base.snapshot().columns if c.name == "x"} == {"x"}
