"""Reading a view's recorded Parquet files (format/view_reader.py): row groups pruned by their
statistics and filtered in Python give exactly Acero's filter of all the rows, in file order."""

from __future__ import annotations

import itertools
import math
import operator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.format.test_predicate import EXACT_TYPES, OPS, _column, element, trees

from omnitable.format import view_reader
from omnitable.format.fs import resolve_location
from omnitable.format.predicate import pruner
from omnitable.format.view_reader import ViewFiles, read_view_files

_RUN = itertools.count()


@st.composite
def shapes(draw: Any, types: dict[str, pa.DataType]) -> pc.Expression:
    """Comparisons with a literal of the column's kind joined by ``&``/``|`` (the simple shape
    format/predicate.py prunes), comparison trees with any literals (it declines many), and
    shapes only Acero evaluates: a negation, a NaN or NULL test, a set membership."""
    tree = draw(trees(list(types)))
    field = pc.field(draw(st.sampled_from(list(types))))
    return draw(st.sampled_from([draw(typed(types)), draw(typed(types)), tree, ~tree,
                                 field.is_nan(), field.is_null(), field.isin([0, 1]),
                                 ~field.isin([0.0, 1.0]) & tree]))  # fmt: skip


@st.composite
def typed(draw: Any, types: dict[str, pa.DataType]) -> pc.Expression:
    name = draw(st.sampled_from(list(types)))
    if pa.types.is_floating(types[name]):
        literal: Any = draw(st.one_of(st.floats(-300, 300), st.sampled_from([0.5, -0.0, math.inf])))
    else:
        literal = draw(st.integers(-300, 300))
    leaf = draw(st.sampled_from(OPS))(pc.field(name), literal)
    if draw(st.integers(0, 2)) > 0:
        return leaf
    return draw(st.sampled_from([operator.and_, operator.or_]))(leaf, draw(typed(types)))


def _write(root: Path, table: pa.Table, group_rows: int) -> ViewFiles:
    name = f"part-{next(_RUN)}.parquet"
    (root / "view").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "view" / name, row_group_size=group_rows)
    return ViewFiles("view", ((name, (root / "view" / name).stat().st_size),))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data(), types=st.lists(st.sampled_from(EXACT_TYPES), min_size=1, max_size=2))
def test_a_read_equals_acero_over_all_rows(
    tmp_path: Path, data: Any, types: list[pa.DataType]
) -> None:
    """Random float64/int64 columns with NULLs and NaNs (sorted by the first, as a view's are, or
    not), small row groups, random comparison filters: the rows read are Acero's filter of all
    the rows, in the same order; a filter Acero cannot evaluate gives None (the zip answers)."""
    n = data.draw(st.integers(0, 30))
    table = pa.table({f"c{i}": _column(t, data.draw(st.lists(element, min_size=n, max_size=n)))
                      for i, t in enumerate(types)})  # fmt: skip
    if data.draw(st.booleans()):
        table = table.sort_by([("c0", "ascending")])
    view = _write(tmp_path, table, data.draw(st.integers(1, 8)))
    where = data.draw(shapes({f.name: f.type for f in table.schema}))
    got = read_view_files(resolve_location(str(tmp_path)), view, table.schema, where,
                          {f.name: f.type for f in table.schema})  # fmt: skip
    try:
        want = table.filter(where)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        assert got is None
        return
    assert got is not None, where
    assert _same(got.table, want), f"{where}: {got.table.to_pylist()} != {want.to_pylist()}"


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Same schema and rows in the same order (NaN equals NaN)."""
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())


def test_row_groups_whose_statistics_rule_the_filter_out_are_not_read(tmp_path: Path) -> None:
    """Sorted values in row groups of 10 (NULLs, 0..29, NaNs): a filter reads the row groups its
    statistics may hold a match in, and the stats count the files and column-chunk bytes read.
    A NULL-only group never matches a comparison; a NaN-only one has no bounds (kept)."""
    values = [None] * 10 + [float(i) for i in range(30)] + [math.nan] * 10
    table = pa.table({"x": pa.array(values, pa.float64()), "y": pa.array(range(50), pa.int64())})
    view, root = _write(tmp_path, table, 10), resolve_location(str(tmp_path))
    types = {"x": pa.float64(), "y": pa.int64()}
    whole = read_view_files(root, view, table.schema, None, {})
    assert whole is not None and _same(whole.table, table) and whole.files_opened == 1
    (file,) = view_reader._opened(root, view) or ()
    meta = pq.ParquetFile(tmp_path / "view" / view.files[0][0]).metadata
    sizes = [sum(meta.row_group(g).column(c).total_compressed_size for c in range(2))
             for g in range(meta.num_row_groups)]  # fmt: skip
    assert whole.bytes_read == sum(sizes)

    def groups(where: pc.Expression) -> list[int]:
        named = {n: t for n, t in types.items() if n in str(where)}  # as Table.read names them
        got = read_view_files(root, view, table.schema, where, named)
        assert got is not None and _same(got.table, table.filter(where)), where
        kept = view_reader._row_groups(file, where, list(named), pruner(where, types), types)
        assert got.bytes_read == sum(sizes[g] for g in kept)
        assert got.files_opened == (1 if kept else 0)
        return kept

    assert groups(pc.field("x") < 5.0) == [1, 4]
    assert groups((pc.field("x") >= 12.0) & (pc.field("x") < 21.0)) == [2, 3, 4]
    assert groups(pc.field("x") == 100.0) == [4]
    assert groups(pc.field("x") != 3.0) == [1, 2, 3, 4]  # NaN != 3 holds
    assert groups(pc.field("y") > 44) == [4]
    assert groups((pc.field("y") < 5) & (pc.field("x") > 1.5)) == []
    # other shapes: Arrow's pruning, except on a column that may hold NaN (every group read)
    assert groups(pc.field("y").isin([3, 47])) == [0, 4]
    assert groups(pc.field("x").is_null()) == [0, 1, 2, 3, 4]
    assert groups(~(pc.field("x") == 0.0)) == [0, 1, 2, 3, 4]  # the NaNs, the group of 1..9


def test_the_statistics_of_a_file_are_worked_out_once_per_column(tmp_path: Path) -> None:
    table = pa.table({"x": pa.array(range(20), pa.int64())})
    view, root = _write(tmp_path, table, 5), resolve_location(str(tmp_path))
    got = read_view_files(root, view, table.schema, pc.field("x") >= 15, {"x": pa.int64()})
    assert got is not None and got.table.column("x").to_pylist() == [15, 16, 17, 18, 19]
    (file,) = view_reader._opened(root, view) or ()
    assert [b.lo for b in file.bounds("x")] == [0, 5, 10, 15]
    assert file.bounds("x") is file.bounds("x")
    assert (view_reader._opened(root, view) or ())[0] is file  # kept


def _files(root: Path, tables: list[pa.Table], group_rows: int) -> ViewFiles:
    """Several files of one view, in the order given."""
    files = [_write(root, t, group_rows).files[0] for t in tables]
    return ViewFiles("view", tuple(files))


def test_files_are_read_in_order_and_a_file_the_filter_rules_out_is_not_opened(
    tmp_path: Path,
) -> None:
    """Three files, the middle one ruled out: rows in file order, two files read. An int literal
    on a float64 column and a float literal on a float32 one prune as Acero compares them."""
    schema = pa.schema([("x", pa.float64()), ("f", pa.float32())])
    parts = [pa.table({"x": [1.0, 2.0], "f": [0.1, 0.2]}, schema=schema),
             pa.table({"x": [50.0, 60.0], "f": [5.0, 6.0]}, schema=schema),
             pa.table({"x": [3.0, 0.5], "f": [0.3, 0.1]}, schema=schema)]  # fmt: skip
    view, root = _files(tmp_path, parts, 1), resolve_location(str(tmp_path))
    types = dict(zip(schema.names, schema.types, strict=True))
    for where in (pc.field("x") < 10, pc.field("f") <= 0.3, pc.field("f") < 0.1):
        got = read_view_files(root, view, schema, where, types)
        want = pa.concat_tables(parts).filter(where)
        assert got is not None and _same(got.table, want), where
        assert got.files_opened == (2 if want.num_rows else 0), where
    # float32 0.1 widened is above the double 0.1: Acero keeps it, and so do the statistics
    got = read_view_files(root, view, schema, pc.field("f") > 0.1, types)
    assert got is not None and got.table.num_rows == 6


def test_what_the_files_cannot_answer_exactly_gives_none(tmp_path: Path) -> None:
    """A column missing from one file, a column stored as another type (even where every row
    group is ruled out), a file written in Spark's legacy calendar, a file gone: None, so the
    caller reads the table's own files."""
    root = resolve_location(str(tmp_path))
    schema = pa.schema([("x", pa.float64()), ("y", pa.int64())])
    whole = pa.table({"x": [1.0], "y": [1]}, schema=schema)
    missing = _files(tmp_path, [whole, pa.table({"x": [2.0]})], 1)
    assert read_view_files(root, missing, schema, None, {}) is None
    narrow = _files(tmp_path, [pa.table({"x": pa.array([1.0], pa.float32()), "y": [1]})], 1)
    for where in (None, pc.field("x") > 100.0):
        assert read_view_files(root, narrow, schema, where, {"x": pa.float64()}) is None
    legacy = whole.replace_schema_metadata({"org.apache.spark.legacyDateTime": ""})
    assert read_view_files(root, _files(tmp_path, [legacy], 1), schema, None, {}) is None
    gone = _files(tmp_path, [whole], 1)
    (tmp_path / "view" / gone.files[0][0]).unlink()
    assert read_view_files(root, gone, schema, None, {}) is None
    ok = read_view_files(root, _files(tmp_path, [whole], 1), schema, None, {})
    assert ok is not None and _same(ok.table, whole)
