"""The Spark part of the demo: features on the ``docs`` table, back-filled, then a new batch
back-filled alone, the status grid, and a Spark SQL query over the logical table."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from omnitable import Table, Warehouse, spark_session
from omnitable.demo import features as demo_features

NEW_BATCH = "debian/changelog"


def run_backfill_demo(
    wh: Warehouse,
    docs: Table,
    limit: int | None,
    master: str,
    say: Callable[[str], None],
    progress: Callable[[str, int, int], None],
) -> dict[str, Any]:
    version = docs.register(*demo_features.ALL)
    say(f"registered features {', '.join(f.name for f in demo_features.ALL)} -> version {version}")
    plan = docs.backfill(["quality", "n_chars"])
    say("plan:\n" + _indent(plan.explain()))
    conf: dict[str, Any] = {"spark.ui.showConsoleProgress": "false", "spark.log.level": "ERROR"}
    spark = spark_session(wh, master=master, **conf)

    def report(step: int, steps: int, done: int, total: int) -> None:
        progress(f"backfill step {step}/{steps}", done, total)

    first = plan.run(spark, progress=report)
    say(
        f"back-filled {sum(s.fragments for s in first.steps)} fragment-steps in "
        f"{first.seconds:.1f}s, versions {first.versions}"
    )
    findings: dict[str, Any] = {"first_plan": plan.explain(), "first_run": first.summary()}

    rows = _changelogs(limit)
    if rows["text"]:
        docs.append(pa.table(rows), NEW_BATCH)
        say(f"appended batch {NEW_BATCH}: {len(rows['text'])} files -> version {docs.version}")
        second = docs.backfill(["quality", "n_chars"])
        say("plan for the new batch (everything else is reused):\n" + _indent(second.explain()))
        run = second.run(spark, progress=report)
        findings.update(second_plan=second.explain(), second_run=run.summary())
    grid = docs.status()
    say("status:\n" + _indent(str(grid)))
    source = "omnitable.docs"
    if spark.conf.get("spark.sql.catalog.omnitable.warehouse", None) != wh.uri:
        # a session started for another warehouse: read through the data source instead
        docs.to_spark(spark).createOrReplaceTempView("demo_docs")
        source = "demo_docs"
    sql = (
        "SELECT _ai_append_name_ AS batch, count(*) AS docs, round(avg(quality), 3) AS "
        f"avg_quality, round(avg(n_words)) AS avg_words FROM {source} GROUP BY 1 ORDER BY 1"
    )
    result = [r.asDict() for r in spark.sql(sql).collect()]
    say("Spark SQL: " + sql)
    for r in result:
        say(
            f"  {r['batch']:<20} docs={r['docs']:<5} avg_quality={r['avg_quality']} "
            f"avg_words={r['avg_words']}"
        )
    findings.update(status=grid.to_pandas().to_dict(), sql=result)
    return findings


def _changelogs(limit: int | None) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {"package": [], "file": [], "text": []}
    root = Path("/usr/share/doc")
    files = sorted(root.glob("*/changelog.Debian.gz")) if root.is_dir() else []
    for path in files[: limit or 300]:
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        rows["package"].append(path.parent.name)
        rows["file"].append(str(path))
        rows["text"].append(text[:20_000])
    return rows


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
