"""``omnitable namespace create|list|drop`` (docs/tables.md, "Namespaces")."""

from __future__ import annotations

import click
from rich.console import Console

from omnitable.cli.context import Context


@click.group()
def namespace() -> None:
    """Namespaces of tables (`ns.table`): create, list, drop."""


@namespace.command("create")
@click.argument("name")
@click.option("--comment", default=None, help="A description, kept as property 'comment'.")
@click.option("--if-not-exists", is_flag=True, help="Succeed when it exists already.")
@click.pass_obj
def namespace_create(ctx: Context, name: str, comment: str | None, if_not_exists: bool) -> None:
    """Create namespace NAME; its tables are then named NAME.table everywhere."""
    props = {} if comment is None else {"comment": comment}
    with ctx.connect() as wh:
        wh.create_namespace(name, props, if_not_exists=if_not_exists)
    ctx.out.result(
        {"namespace": name, "created": True},
        lambda console: console.print(f"Created namespace '{name}'."),
    )


@namespace.command("list")
@click.pass_obj
def namespace_list(ctx: Context) -> None:
    """List the namespaces and how many tables each holds."""
    with ctx.connect() as wh:
        rows = [{"namespace": ns, "tables": len(wh.tables(namespace=ns))} for ns in wh.namespaces()]

    def render(console: Console) -> None:
        console.print(
            ctx.out.table("Namespaces", ["namespace", "tables"], [list(r.values()) for r in rows])
        )

    ctx.out.result(rows, render)


@namespace.command("drop")
@click.argument("name")
@click.option("--cascade", is_flag=True, help="Drop its tables too (else it must be empty).")
@click.option("--keep-files", is_flag=True, help="With --cascade: leave the tables' files.")
@click.pass_obj
def namespace_drop(ctx: Context, name: str, cascade: bool, keep_files: bool) -> None:
    """Drop namespace NAME (never 'default'). A namespace holding tables is refused unless
    --cascade, which drops them (and deletes their files unless --keep-files)."""
    with ctx.connect() as wh:
        dropped = wh.drop_namespace(name, cascade=cascade, purge=not keep_files)

    def render(console: Console) -> None:
        also = f" and its tables {', '.join(dropped)}" if dropped else ""
        console.print(f"Dropped namespace '{name}'{also}.")

    ctx.out.result({"namespace": name, "dropped_tables": dropped}, render)
