"""``omnitable demo``: build the demo warehouse and print what happened."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.console import Console

from omnitable.cli.context import Context


@click.command()
@click.option("--limit", type=int, default=None, help="At most this many files per batch.")
@click.option(
    "--master",
    default="local[2]",
    show_default=True,
    help="Spark master for the feature backfill part.",
)
@click.option("--no-spark", is_flag=True, help="Skip the Spark part (features and backfills).")
@click.pass_obj
def demo(ctx: Context, limit: int | None, master: str, no_spark: bool) -> None:
    """Build a demo warehouse from text on this machine (stdlib code, package docs)."""
    from omnitable.demo import run_demo

    out = ctx.out
    with ctx.connect() as wh:
        out.message(f"[bold]OmniTable demo[/] in {wh.address.display()}")
        with out.progress() as progress:
            result = run_demo(
                wh,
                limit,
                progress,
                lambda line: out.message(f"  {line}"),
                None if no_spark else master,
            )

    def render(console: Console) -> None:
        rows = [
            [
                t.name,
                t.version,
                len(t.batches),
                sum(t.batches.values()),
                t.columns,
                t.files,
                f"{t.bytes_on_disk / 1e6:.1f} MB",
            ]
            for t in result.tables
        ]
        console.print(
            out.table(
                "Demo warehouse",
                ["table", "version", "batches", "rows", "columns", "files", "size"],
                rows,
            )
        )
        largest = result.findings.get("largest_modules", [])
        if largest:
            console.print(
                out.table(
                    "Largest stdlib modules",
                    ["module", "lines", "defs"],
                    [[r["module"], r["lines"], r["n_defs"]] for r in largest],
                )
            )
        console.print(
            f"Done in {result.seconds:.1f}s. Try: omnitable show code  |  omnitable tables"
        )

    out.result(asdict(result), render)
