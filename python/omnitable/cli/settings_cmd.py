"""``omnitable settings``: the Python settings, their defaults and docs."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.settings import SETTINGS, markdown, with_markdown


@click.command(name="settings")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the table as markdown.")
@click.argument("page", required=False, type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def settings_command(ctx: Context, as_markdown: bool, page: str | None) -> None:
    """List the settings (docs/settings.md). With --markdown PAGE, write the table into PAGE
    between its settings-table markers."""
    if page is not None:
        if not as_markdown:
            raise click.UsageError("PAGE is written only with --markdown")
        path = Path(page)
        path.write_text(with_markdown(path.read_text(encoding="utf-8")), encoding="utf-8")
        return
    if as_markdown:
        click.echo(markdown(), nl=False)
        return
    rows = [{"key": s.key, "default": s.default, "doc": s.doc} for s in SETTINGS.values()]

    def render(console: Console) -> None:
        cells = [[r["key"], repr(r["default"]), r["doc"]] for r in rows]
        console.print(ctx.out.table("Settings", ["key", "default", "doc"], cells))

    ctx.out.result({"settings": rows}, render)
