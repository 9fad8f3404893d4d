"""The command line's filter language (against pyarrow's own evaluation) and the data-operation
commands (delete, history, retire/restore/rename, update, rollback, revert, upsert, lookup):
results, JSON, exit codes, nothing committed on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable.cli.main import main
from omnitable.vocabulary.filters import parse_filter

DATA = pa.table(
    {
        "label": ["spam", "ok", "spam", None, "it's"],
        "score": [0.1, 0.5, 0.9, 0.05, 2.0],
        "n": pa.array([1, 2, 3, None, 5], pa.int64()),
        "flag": [True, False, None, True, False],
    }
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("label = 'spam'", pc.field("label") == "spam"),
        (
            "label == 'spam' AND score < 0.2",
            (pc.field("label") == "spam") & (pc.field("score") < 0.2),
        ),
        ("n >= 2 or label is null", (pc.field("n") >= 2) | pc.field("label").is_null()),
        ("NOT (n <> 3)", ~(pc.field("n") != 3)),
        ("label IN ('ok', 'it''s')", pc.field("label").isin(["ok", "it's"])),
        ("label NOT IN ('ok')", ~pc.field("label").isin(["ok"])),
        ("n IS NOT NULL AND `score` > 1e-1", ~pc.field("n").is_null() & (pc.field("score") > 0.1)),
        ("flag = TRUE", pc.equal(pc.field("flag"), True)),
        (
            "n > -1 AND n <= 3 OR flag = false",
            ((pc.field("n") > -1) & (pc.field("n") <= 3)) | pc.equal(pc.field("flag"), False),
        ),
    ],
)
def test_filters_select_what_pyarrow_selects(text: str, expected: pc.Expression) -> None:
    assert DATA.filter(parse_filter(text)).equals(DATA.filter(expected))


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("label = ", "expected a value"),
        ("label = 'x' AND", "expected a column name"),
        ("(n > 1", r"expected \)"),
        ("n > 1 n", "expected the end"),
        ("n ~ 1", "unexpected '~ 1'"),
        ("n IN 1", r"expected \("),
        ("n , 1", "expected a comparison"),
    ],
)
def test_bad_filters_say_where(text: str, pattern: str) -> None:
    with pytest.raises(omnitable.ValidationError, match=pattern):
        parse_filter(text)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


def test_delete_and_history_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    with omnitable.connect(wh) as w:
        t = w.create_table("docs", {"label": "string", "score": "double"})
        t.append(DATA.select(["label", "score"]), "b1")
        ids = t.read([omnitable.ROW_ID])[omnitable.ROW_ID].to_pylist()
    code, out, err = _run(
        capsys, "-w", wh, "delete", "docs", "--where", "label = 'spam' AND score < 0.2"
    )
    assert code == 0, err
    assert "Deleted 1 row(s) in 1 fragment(s) of 'docs': version 2" in " ".join(out.split())
    code, out, _ = _run(
        capsys,
        "--json",
        "-w",
        wh,
        "delete",
        "docs",
        "--ids",
        f"{ids[1]},{ids[4]}",
        "--why",
        "dupes",
    )
    assert code == 0 and json.loads(out) == {
        "table": "docs",
        "version": 3,
        "rows": 2,
        "fragments": 1,
    }
    code, out, _ = _run(capsys, "--json", "-w", wh, "delete", "docs", "--where", "label = 'none'")
    assert code == 0 and json.loads(out)["version"] is None
    for args, exit_code, pattern in [
        (["--where", "label ="], 2, "expected a value"),
        (["--ids", "1,x"], 2, "comma-separated integers"),
        (["--ids", "99999"], 3, "not live rows"),
        (["--where", "nolabel IS NULL"], 2, "names a column it does not have"),
        ([], 2, "exactly one of --where and --ids"),
        (["--where", "score > 0", "--ids", "1"], 2, "exactly one of --where and --ids"),
    ]:
        code, _, err = _run(capsys, "-w", wh, "delete", "docs", *args)
        assert (code, pattern in err) == (exit_code, True), (args, err)
    code, _, err = _run(capsys, "-w", wh, "delete", "nosuch", "--ids", "1")
    assert code == 3 and "Cannot find table 'nosuch'" in err
    code, out, _ = _run(capsys, "--json", "-w", wh, "history", "docs", "--limit", "2")
    history = json.loads(out)
    assert [h["op"] for h in history] == ["delete", "delete"]
    assert history[0]["summary"]["why"] == "dupes" and history[0]["summary"]["rows"] == 2
    with omnitable.connect(wh) as w:
        assert w.table("docs").read(["label"])["label"].to_pylist() == ["spam", None]


def test_retire_restore_and_rename_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = str(tmp_path / "wh")
    with omnitable.connect(wh) as w:
        w.create_table("docs", {"label": "string", "score": "double"}).append(
            DATA.select(["label", "score"]), "b1"
        )
    code, out, _ = _run(capsys, "--json", "-w", wh, "retire", "docs", "score")
    assert code == 0 and json.loads(out) == {"table": "docs", "version": 2, "retired": ["score"]}
    code, _, err = _run(capsys, "-w", wh, "retire", "docs", "score")
    assert code == 3 and "it is retired; restore it first" in err
    code, out, _ = _run(capsys, "-w", wh, "restore", "docs", "score")
    assert code == 0 and "Restored 'score' of 'docs': version 3" in " ".join(out.split())
    code, out, _ = _run(capsys, "--json", "-w", wh, "rename", "docs", "label", "tag")
    assert code == 0 and json.loads(out)["version"] == 4
    code, _, err = _run(capsys, "-w", wh, "rename", "docs", "tag", "score")
    assert code == 1 and "already has a column named 'score'" in err
    code, _, err = _run(capsys, "-w", wh, "restore", "docs", "nope")
    assert code == 3 and "does not exist" in err
    with omnitable.connect(wh) as w:
        assert w.table("docs").schema.names[2:] == ["tag", "score"]


def test_update_command_reads_parquet_csv_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = str(tmp_path / "wh")
    with omnitable.connect(wh) as w:
        t = w.create_table("docs", {"label": "string", "score": "double"})
        t.append(DATA.select(["label", "score"]), "b1")
        ids = t.read([omnitable.ROW_ID])[omnitable.ROW_ID].to_pylist()
    pq_path, csv_path, json_path = (tmp_path / n for n in ("u.parquet", "u.csv", "u.jsonl"))
    pq.write_table(pa.table({omnitable.ROW_ID: [ids[0]], "label": ["P"]}), pq_path)
    csv_path.write_text(f"{omnitable.ROW_ID},label,score\n{ids[1]},C,9.5\n")
    json_path.write_text(f'{{"{omnitable.ROW_ID}": {ids[2]}, "score": 1.25}}\n')
    code, out, err = _run(capsys, "--json", "-w", wh, "update", "docs", "--from", str(pq_path))
    assert code == 0, err
    assert json.loads(out)["rows"] == 1 and json.loads(out)["version"] == 2
    code, _, err = _run(capsys, "-w", wh, "update", "docs", "--from", str(csv_path),
                        "--columns", "label", "--why", "review")  # fmt: skip
    assert code == 0, err
    assert _run(capsys, "-w", wh, "update", "docs", "--from", str(json_path))[0] == 0
    bad = tmp_path / "u.txt"
    bad.write_text("x")
    code, _, err = _run(capsys, "-w", wh, "update", "docs", "--from", str(bad))
    assert code == 2 and "give a .parquet, .csv, .json or .jsonl file" in err
    csv_path.write_text(f"{omnitable.ROW_ID},label\n999999,Z\n")
    code, _, err = _run(capsys, "-w", wh, "update", "docs", "--from", str(csv_path))
    assert code == 3 and "not live rows" in err
    with omnitable.connect(wh) as w:
        got = w.table("docs").read(["label", "score"]).to_pydict()
    assert got["label"][:3] == ["P", "C", "spam"] and got["score"][:3] == [0.1, 0.5, 1.25]


def test_rollback_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    with omnitable.connect(wh) as w:
        t = w.create_table("docs", {"label": "string", "score": "double"})
        t.append(DATA.select(["label", "score"]), "b1")
        t.delete(pc.field("label") == "spam")
    code, out, _ = _run(capsys, "--json", "-w", wh, "rollback", "docs", "1", "--why", "oops")
    assert code == 0 and json.loads(out) == {"table": "docs", "version": 3, "to_version": 1}
    code, _, err = _run(capsys, "-w", wh, "rollback", "docs", "3")
    assert code == 2 and "give an earlier version" in err
    code, _, err = _run(capsys, "-w", wh, "rollback", "docs", "x")
    assert code == 2
    with omnitable.connect(wh) as w:
        assert w.table("docs").count() == 5


def test_revert_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    with omnitable.connect(wh) as w:
        t = w.create_table("docs", {"label": "string", "score": "double"})
        t.append(DATA.select(["label", "score"]), "b1")
        t.delete(pc.field("label") == "spam")
        t.append(DATA.select(["label"]), "b2")
    code, out, _ = _run(capsys, "--json", "-w", wh, "revert", "docs", "2", "--why", "oops")
    assert code == 0 and json.loads(out) == {"table": "docs", "version": 4, "reverted": 2,
                                             "stale": []}  # fmt: skip
    code, _, err = _run(capsys, "-w", wh, "revert", "docs", "2")
    assert code == 2 and "reverted already" in err
    code, _, err = _run(capsys, "-w", wh, "revert", "docs", "0")
    assert code == 2 and "created the table" in err
    code, _, err = _run(capsys, "-w", wh, "revert", "docs", "3", "--dependents", "x")
    assert code == 2
    with omnitable.connect(wh) as w:
        assert w.table("docs").count() == 10  # b1 whole again, b2 kept


def test_upsert_and_lookup_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    with omnitable.connect(wh) as w:
        w.create_table("pages", {"url": "string", "label": "string"}, key="url")
        w.create_table("plain", {"url": "string"})
        w.create_table("pairs", {"site": "string", "n": "bigint", "label": "string"},
                       key=["site", "n"])  # fmt: skip
    first, late = tmp_path / "first.parquet", tmp_path / "late.csv"
    pq.write_table(pa.table({"url": ["a", "b"], "label": ["ok", "spam"]}), first)
    late.write_text("url,label\nb,ok\nc,new\n")
    code, out, err = _run(capsys, "--json", "-w", wh, "upsert", "pages", "--from", str(first),
                          "--batch", "crawl/1")  # fmt: skip
    assert code == 0, err
    assert json.loads(out) | {"bytes_written": 0} == {
        "table": "pages", "version": 1, "inserted": 2, "merged": 0, "unchanged": 0,
        "rejected": 0, "files": 0, "bytes_written": 0,
    }  # fmt: skip
    code, out, err = _run(capsys, "-w", wh, "upsert", "pages", "--from", str(late),
                          "--policy", "first_write_wins")  # fmt: skip
    assert code == 0 and "1 inserted, 0 merged, 1 unchanged, 0 rejected; version 2" in out, err
    code, out, err = _run(capsys, "--json", "-w", wh, "lookup", "pages", "c", "b", "zz",
                          "--columns", "url,label")  # fmt: skip
    assert code == 0 and json.loads(out) == [
        {"url": "c", "label": "new"},
        {"url": "b", "label": "spam"},
    ], err
    code, out, err = _run(capsys, "--json", "-w", wh, "lookup", "pages", "c", "b", "zz",
                          "--columns", "label,url", "--verify-keys")  # fmt: skip
    assert code == 0 and json.loads(out) == [
        {"label": "new", "url": "c"},
        {"label": "spam", "url": "b"},
    ], err
    code, out, err = _run(capsys, "-w", wh, "lookup", "pages", "a", "--version", "1")
    assert code == 0 and "1 of 1 key(s) in pages" in out, err
    # bad input: exit 2, nothing committed
    code, _, err = _run(capsys, "-w", wh, "upsert", "pages", "--from", str(late), "--policy", "x")
    assert code == 2 and "Cannot upsert with policy 'x'" in err
    code, _, err = _run(capsys, "-w", wh, "upsert", "plain", "--from", str(late))
    assert code == 2 and "it has no key" in err
    code, _, err = _run(capsys, "-w", wh, "lookup", "pairs", "s1")
    assert code == 2 and "give each key as 2 comma-separated values" in err
    code, _, err = _run(capsys, "-w", wh, "lookup", "pairs", "s1,notanumber")
    assert code == 2 and "key column 'n'" in err
    with omnitable.connect(wh) as w:
        assert w.table("pages").version == 2 and w.table("plain").version == 0
