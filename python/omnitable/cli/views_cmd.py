"""``omnitable view create|list|drop`` (hot column-group views) and ``omnitable access-log``
(which column sets scans read together), docs/governance.md."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.exceptions import ValidationError
from omnitable.governance.service import parse_interval


@click.group()
def view() -> None:
    """Hot column-group views of a table: create, list, drop (refreshed by `govern --jobs views`)."""


@view.command("create")
@click.argument("table")
@click.argument("name")
@click.option(
    "--columns", required=True, help="Comma-separated columns the view materializes (e.g. a,b,c)."
)
@click.pass_obj
def view_create(ctx: Context, table: str, name: str, columns: str) -> None:
    """Declare view NAME of TABLE over COLUMNS; `govern TABLE --jobs views` fills it."""
    names = [c.strip() for c in columns.split(",") if c.strip()]
    with ctx.connect() as wh:
        info = wh.table(table).create_view(name, names)
    ctx.out.result(
        _jsonable(info),
        lambda console: console.print(
            f"Declared view '{name}' of '{table}' over {', '.join(names)}; "
            f"run `omnitable govern {table} --jobs views` to fill it.",
            markup=False,
        ),
    )


@view.command("list")
@click.argument("table")
@click.pass_obj
def view_list(ctx: Context, table: str) -> None:
    """List the views of TABLE with their columns and last refresh."""
    with ctx.connect() as wh:
        views = wh.table(table).views()
    rows = [[v["name"], ", ".join(v["columns"]), v["refreshed_version"], v["path"]]
            for v in views]  # fmt: skip

    def render(console: Console) -> None:
        if not views:
            console.print(f"'{table}' has no views.")
            return
        columns = ["view", "columns", "refreshed at version", "path"]
        console.print(ctx.out.table(f"views of {table}", columns, rows))

    ctx.out.result([_jsonable(v) for v in views], render)


@view.command("drop")
@click.argument("table")
@click.argument("name")
@click.pass_obj
def view_drop(ctx: Context, table: str, name: str) -> None:
    """Forget view NAME of TABLE and delete its Delta table."""
    with ctx.connect() as wh:
        wh.table(table).drop_view(name)
    ctx.out.result(
        {"table": table, "view": name, "dropped": True},
        lambda console: console.print(f"Dropped view '{name}' of '{table}'.", markup=False),
    )


@click.command("access-log")
@click.argument("table")
@click.option("--since", default=None, help="Only scans this long ago or later (30s, 10m, 7d).")
@click.option("--branch", default=None, help="Only scans of this branch (default: every one).")
@click.option("--limit", type=int, default=20, show_default=True, help="Most scanned N sets.")
@click.pass_obj
def access_log(ctx: Context, table: str, since: str | None, branch: str | None, limit: int) -> None:
    """The column sets scans of TABLE read together, most scanned first (what the regroup job
    and hot views are chosen from)."""
    if limit < 1:
        raise ValidationError(f"--limit must be at least 1, got {limit}")
    window = None if since is None else dt.timedelta(seconds=parse_interval(since))
    with ctx.connect() as wh:
        sets = wh.table(table).access_log(window, branch=branch)[:limit]

    def render(console: Console) -> None:
        if not sets:
            console.print(
                f"No scans of '{table}' recorded" + (f" since {since}." if since else ".")
            )
            return
        rows = [[s["count"], ", ".join(s["columns"]), s["last"]] for s in sets]
        console.print(
            ctx.out.table(f"co-read columns of {table}", ["scans", "columns", "last"], rows)
        )

    ctx.out.result([_jsonable(s) for s in sets], render)


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in info.items()}
