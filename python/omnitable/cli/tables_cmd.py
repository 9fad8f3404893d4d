"""``omnitable tables`` and ``omnitable show TABLE``."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from omnitable.cli.context import Context


@click.command()
@click.option(
    "--namespace", "-n", default=None, help="Only this namespace's tables (default: all)."
)
@click.pass_obj
def tables(ctx: Context, namespace: str | None) -> None:
    """List the warehouse's tables with their size and version (tables of namespace
    'default' by name, others as namespace.table)."""
    with ctx.connect() as wh:
        where = wh.address.display() if ctx.warehouse else "./omnitable-warehouse"
        rows = []
        for name in wh.tables(namespace=namespace):
            t = wh.table(name)
            batches = t.batches()
            rows.append(
                {
                    "table": name,
                    "version": t.version,
                    "batches": len(batches),
                    "rows": sum(b.rows for b in batches),
                    "columns": len(t.schema) - 2,
                }
            )

    def render(console: Console) -> None:
        if not rows:
            console.print(f"No tables in {where}.")
            return
        console.print(
            ctx.out.table(
                "Tables",
                ["table", "version", "batches", "rows", "columns"],
                [list(r.values()) for r in rows],
            )
        )

    ctx.out.result(rows, render)


@click.command()
@click.argument("table")
@click.option(
    "--history",
    "history_limit",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many versions to list.",
)
@click.pass_obj
def show(ctx: Context, table: str, history_limit: int) -> None:
    """Show a table's schema, batches and versions."""
    with ctx.connect() as wh:
        t = wh.table(table)
        snap = t.snapshot(with_files=False)
        info: dict[str, Any] = {
            "table": t.name,
            "version": snap.version,
            "columns": [
                {"name": f.name, "type": _ddl(snap, f.name), "group": _group(snap, f.name)}
                for f in snap.arrow_schema()
            ],
            "batches": [
                {"name": b.name, "rows": b.rows, "fragments": b.fragments, "created": b.created}
                for b in t.batches()
            ],
            "history": [
                {"version": h.version, "op": h.op, "time": h.time, "summary": h.summary}
                for h in t.history(history_limit)
            ],
        }

    def render(console: Console) -> None:
        out = ctx.out
        console.print(f"[bold]{info['table']}[/] at version {info['version']}")
        console.print(
            out.table(
                "Columns",
                ["name", "type", "group"],
                [[c["name"], c["type"], c["group"]] for c in info["columns"]],
            )
        )
        console.print(
            out.table(
                "Batches",
                ["name", "rows", "fragments", "created"],
                [list(b.values()) for b in info["batches"]],
            )
        )
        console.print(
            out.table(
                "Versions",
                ["version", "op", "time", "summary"],
                [
                    [h["version"], h["op"], h["time"], short_summary(h["summary"])]
                    for h in info["history"]
                ],
            )
        )

    ctx.out.result(info, render)


def _ddl(snap: Any, name: str) -> str:
    if name == "_ai_append_name_":
        return "string (batch)"
    return str(snap.column(name).data_type)


def _group(snap: Any, name: str) -> str:
    if name == "_ai_append_name_":
        return "-"
    return str(snap.column(name).group_name)


def short_summary(summary: dict[str, Any]) -> str:
    """A commit summary on one line (at most 80 characters)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(summary.items()))[:80]
