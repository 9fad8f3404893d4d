"""The demo's pipeline: builds the ``code`` and ``docs`` tables from real text on this machine.

``code``: the Python standard library's ``.py`` files, one batch per slice of the alphabet.
``docs``: Debian package documentation under ``/usr/share/doc`` (copyright files and READMEs).
Both get derived columns attached with ``add_columns``, are read back with filters and time
travel, and summarized. Programmatic entry point: :func:`run_demo`.
"""

from __future__ import annotations

import gzip
import re
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from omnitable import ROW_ID, NotFoundError, Table, Warehouse

CODE_BATCHES = {"stdlib/a-f": "abcdef", "stdlib/g-o": "ghijklmno", "stdlib/p-z": "pqrstuvwxyz_"}
DOC_ROOTS = (Path("/usr/share/doc"),)
LICENCES = ("Apache", "GPL", "LGPL", "BSD", "MIT", "MPL", "Artistic", "public domain")

Progress = Callable[[str, int, int], None]  # (step, done, total)


@dataclass
class TableSummary:
    name: str
    version: int
    batches: dict[str, int]
    columns: int
    files: int
    bytes_on_disk: int


@dataclass
class DemoResult:
    """What the demo built and found (printed by the CLI, asserted by tests)."""

    warehouse: str
    tables: list[TableSummary] = field(default_factory=list)
    findings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def run_demo(
    wh: Warehouse,
    limit: int | None = None,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda _: None,
    spark_master: str | None = "local[2]",
) -> DemoResult:
    """Build (or rebuild) the demo tables in ``wh`` and return what happened.

    Args:
        limit: at most this many files per batch (None: all).
        progress: called as files are collected and batches ingested.
        say: receives one line per step.
        spark_master: run the feature/backfill part on this Spark master (None: skip it).
    """
    started = time.perf_counter()
    progress = progress or (lambda *_: None)
    for name in ("code", "docs"):
        try:
            wh.drop_table(name)
            say(f"dropped the previous demo table '{name}'")
        except NotFoundError:
            pass
    result = DemoResult(wh.address.display())
    code = _build_code(wh, limit, progress, say)
    docs = _build_docs(wh, limit, progress, say)
    result.findings.update(_explore_code(code, say))
    if docs is not None:
        result.findings.update(_explore_docs(docs, say))
        if spark_master is not None:
            from omnitable.demo.backfill import run_backfill_demo

            result.findings.update(run_backfill_demo(wh, docs, limit, spark_master, say, progress))
    for t in (code, docs):
        if t is not None:
            result.tables.append(summarize(t))
    result.seconds = time.perf_counter() - started
    return result


# -- code: the Python standard library --------------------------------------------------------


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(
        p
        for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )


def _build_code(
    wh: Warehouse, limit: int | None, progress: Progress, say: Callable[[str], None]
) -> Table:
    t = wh.create_table(
        "code",
        {
            "path": "string",
            "module": "string",
            "source": "string",
            "bytes": "bigint",
            "lines": "int",
        },
        groups={"content": ["source"]},
    )
    say("created table 'code' (narrow metadata in group 'base', source text in group 'content')")
    root = Path(sysconfig.get_paths()["stdlib"])
    files = _stdlib_files()
    for batch, letters in CODE_BATCHES.items():
        chosen = [p for p in files if p.relative_to(root).parts[0][0].lower() in letters][:limit]
        rows: dict[str, list[Any]] = {
            "path": [],
            "module": [],
            "source": [],
            "bytes": [],
            "lines": [],
        }
        for i, path in enumerate(chosen):
            text = path.read_text("utf-8", errors="replace")
            rel = path.relative_to(root)
            rows["path"].append(str(rel))
            rows["module"].append(".".join(rel.with_suffix("").parts))
            rows["source"].append(text)
            rows["bytes"].append(len(text.encode()))
            rows["lines"].append(text.count("\n") + 1)
            if i % 100 == 0:
                progress(f"reading {batch}", i, len(chosen))
        progress(f"reading {batch}", len(chosen), len(chosen))
        version = t.append(pa.table(rows, schema=_code_schema()), batch, target_fragment_rows=256)
        say(f"appended batch {batch}: {len(chosen)} files -> version {version}")
    _add_signals(t, "source", "code_signals", say, {
        "n_defs": (lambda s: len(re.findall(r"^\s*(?:async\s+)?def ", s, re.M)), pa.int32()),
        "n_classes": (lambda s: len(re.findall(r"^\s*class ", s, re.M)), pa.int32()),
        "has_main": (lambda s: 'if __name__ == "__main__"' in s
                     or "if __name__ == '__main__'" in s, pa.bool_()),
    })  # fmt: skip
    return t


def _code_schema() -> pa.Schema:
    return pa.schema(
        [
            ("path", pa.string()),
            ("module", pa.string()),
            ("source", pa.string()),
            ("bytes", pa.int64()),
            ("lines", pa.int32()),
        ]
    )


def _explore_code(t: Table, say: Callable[[str], None]) -> dict[str, Any]:
    big = t.scan(columns=["module", "lines", "n_defs"], where=pc.field("lines") > 3000)
    top = sorted(big.table.to_pylist(), key=lambda r: -r["lines"])[:5]
    say(
        f"modules over 3,000 lines: {big.table.num_rows} (read {big.stats.fragments_read} of "
        f"{big.stats.fragments_total} fragments thanks to min/max statistics)"
    )
    scripts = t.read(columns=["module"], where=pc.field("has_main"))
    first_version = t.read(columns=[ROW_ID], version=1).num_rows
    say(f"time travel: version 1 had {first_version} rows, version {t.version} has {t.count()}")
    return {
        "largest_modules": top,
        "modules_with_main": scripts.num_rows,
        "code_rows_at_version_1": first_version,
        "code_fragments_read_for_filter": big.stats.fragments_read,
        "code_fragments_total": big.stats.fragments_total,
    }


# -- docs: Debian package documentation --------------------------------------------------------


def _doc_files(kind: str) -> Iterator[tuple[str, Path]]:
    for root in DOC_ROOTS:
        if not root.is_dir():
            continue
        for pkg in sorted(root.iterdir()):
            if not pkg.is_dir():
                continue
            candidates = [pkg / "copyright"] if kind == "copyright" else sorted(pkg.glob("README*"))
            for c in candidates:
                if c.is_file() and not c.is_symlink():
                    yield pkg.name, c


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except OSError:
            return ""
    return raw.decode("utf-8", errors="replace")


def _build_docs(
    wh: Warehouse, limit: int | None, progress: Progress, say: Callable[[str], None]
) -> Table | None:
    batches = {
        "debian/copyright": list(_doc_files("copyright"))[:limit],
        "debian/readme": list(_doc_files("readme"))[:limit],
    }
    if not any(batches.values()):
        say("no package documentation under /usr/share/doc on this machine; skipping 'docs'")
        return None
    t = wh.create_table("docs", {"package": "string", "file": "string", "text": "string"})
    say("created table 'docs'")
    for batch, files in batches.items():
        if not files:
            continue
        rows: dict[str, list[str]] = {"package": [], "file": [], "text": []}
        for i, (pkg, path) in enumerate(files):
            rows["package"].append(pkg)
            rows["file"].append(str(path))
            rows["text"].append(_read_text(path))
            if i % 100 == 0:
                progress(f"reading {batch}", i, len(files))
        progress(f"reading {batch}", len(files), len(files))
        version = t.append(pa.table(rows), batch)
        say(f"appended batch {batch}: {len(files)} files -> version {version}")
    _add_signals(t, "text", "doc_signals", say, {
        "words": (lambda s: len(s.split()), pa.int32()),
        "licence": (_licence, pa.string()),
    })  # fmt: skip
    return t


def _add_signals(
    t: Table,
    source: str,
    group: str,
    say: Callable[[str], None],
    signals: dict[str, tuple[Callable[[str], Any], pa.DataType]],
) -> None:
    """Compute each signal over the text column ``source`` and attach them as one new group."""
    src = t.read(columns=[ROW_ID, source])
    texts = src.column(source).to_pylist()
    columns: dict[str, Any] = {ROW_ID: src.column(ROW_ID)}
    for name, (fn, dtype) in signals.items():
        columns[name] = pa.array([fn(s) for s in texts], dtype)
    t.add_columns(pa.table(columns), group=group)
    say(f"added columns {', '.join(signals)} (group '{group}') -> version {t.version}")


def _licence(text: str) -> str | None:
    hits = [(text.find(name), name) for name in LICENCES if name in text]
    return min(hits)[1] if hits else None


def _explore_docs(t: Table, say: Callable[[str], None]) -> dict[str, Any]:
    lic = t.read(columns=["licence"], batches=["debian/copyright"]).column("licence")
    counts = pc.value_counts(lic.drop_null()).to_pylist()
    top = sorted(((c["counts"], c["values"]) for c in counts), reverse=True)[:5]
    say("most named licences in copyright files: " + ", ".join(f"{name} ({n})" for n, name in top))
    return {"licences": {name: n for n, name in top}}


# -- summary ------------------------------------------------------------------------------------


def summarize(t: Table) -> TableSummary:
    snap = t.snapshot()
    files = [
        f
        for fs in snap.files_by_fragment.values()
        for f in fs
        if any(fr.fragment_id == f.fragment_id for fr in snap.fragments)
    ]
    return TableSummary(
        t.name,
        snap.version,
        {b.name: b.rows for b in t.batches()},
        len(snap.user_columns),
        len(files),
        sum(f.size_bytes for f in files),
    )
