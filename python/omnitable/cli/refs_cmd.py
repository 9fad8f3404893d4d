"""``omnitable branch create|list|delete`` and ``omnitable tag create|list|delete``
(docs/branches.md)."""

from __future__ import annotations

import dataclasses

import click
from rich.console import Console
from rich.table import Table as RichTable

from omnitable.catalog.refs import Ref
from omnitable.cli.context import Context
from omnitable.dataops.merge import MergeResult


@click.group()
def branch() -> None:
    """Branches of a table: create, list, delete, merge, rebase."""


@branch.command("create")
@click.argument("table")
@click.argument("name")
@click.option(
    "--from-version", type=int, default=None, help="Fork at this version (default: head)."
)
@click.option("--from-branch", default=None, help="Fork from this branch (default: main).")
@click.option("--from-tag", default=None, help="Fork at the version this tag pins.")
@click.pass_obj
def branch_create(
    ctx: Context,
    table: str,
    name: str,
    from_version: int | None,
    from_branch: str | None,
    from_tag: str | None,
) -> None:
    """Create branch NAME of TABLE (a catalog row; no data is copied)."""
    with ctx.connect() as wh:
        t = wh.table(table)
        bound = t.create_branch(name, from_version, from_branch=from_branch, from_tag=from_tag)
        ref = next(r for r in t.branches() if r.name == bound.current_branch)
    _done(ctx, table, ref, f"Created branch '{name}' of '{table}' at version {ref.version}.")


@branch.command("list")
@click.argument("table")
@click.pass_obj
def branch_list(ctx: Context, table: str) -> None:
    """List the branches of TABLE."""
    with ctx.connect() as wh:
        refs = wh.table(table).branches()
    _listing(ctx, table, refs, "branch")


@branch.command("delete")
@click.argument("table")
@click.argument("name")
@click.pass_obj
def branch_delete(ctx: Context, table: str, name: str) -> None:
    """Delete branch NAME of TABLE (its files stay until cleanup)."""
    with ctx.connect() as wh:
        wh.table(table).delete_branch(name)
    _deleted(ctx, table, name, "branch")


STRATEGY = click.option(
    "--strategy",
    type=click.Choice(["fail", "ours", "theirs"]),
    default="fail",
    show_default=True,
    help="Conflicts: fail (list them, merge nothing), ours (keep the target's), theirs (take "
    "the source's).",
)


@branch.command("merge")
@click.argument("table")
@click.argument("source")
@click.option("--into", default="main", show_default=True, help="Branch to merge into.")
@STRATEGY
@click.pass_obj
def branch_merge(ctx: Context, table: str, source: str, into: str, strategy: str) -> None:
    """Merge branch SOURCE of TABLE into another branch at column grain (docs/branches.md)."""
    with ctx.connect() as wh:
        result = wh.table(table).merge(source, into, strategy=strategy)
    _merged(ctx, table, source, into, result)


@branch.command("rebase")
@click.argument("table")
@click.argument("name")
@click.option("--onto", default="main", show_default=True, help="Branch whose changes to bring.")
@STRATEGY
@click.pass_obj
def branch_rebase(ctx: Context, table: str, name: str, onto: str, strategy: str) -> None:
    """Bring ONTO's changes into branch NAME of TABLE (a merge of ONTO into it)."""
    with ctx.connect() as wh:
        result = wh.table(table).rebase(name, onto, strategy=strategy)
    _merged(ctx, table, onto, name, result)


def _merged(ctx: Context, table: str, source: str, into: str, result: MergeResult) -> None:
    data = {"table": table, "source": source, "into": into,
            **dataclasses.asdict(result)}  # fmt: skip

    def render(console: Console) -> None:
        if result.version is None:
            console.print(f"'{into}' already has every change of '{source}'; nothing committed.")
            return
        how = "fast-forward" if result.fast_forward else (
            f"{result.cells} cell(s), {result.batches} batch(es), {result.deletes} fragment(s) "
            f"with deletes, {result.columns} column(s)"
        )  # fmt: skip
        console.print(
            f"Merged '{source}' into '{into}' of '{table}': version {result.version} ({how})."
        )
        for c in result.resolved:
            console.print(
                f"  resolved {c.kind} {c.where} {c.column or ''}: {c.source} / {c.target}"
            )

    ctx.out.result(data, render)


@click.group()
def tag() -> None:
    """Tags of a table: create, list, delete."""


@tag.command("create")
@click.argument("table")
@click.argument("name")
@click.option("--version", type=int, default=None, help="Version to pin (default: head).")
@click.option("--branch", "on_branch", default="main", show_default=True, help="Branch to tag.")
@click.option(
    "--max-age", type=float, default=None, help="Retention in seconds (default: forever)."
)
@click.pass_obj
def tag_create(
    ctx: Context,
    table: str,
    name: str,
    version: int | None,
    on_branch: str,
    max_age: float | None,
) -> None:
    """Create tag NAME of TABLE pinning a version."""
    with ctx.connect() as wh:
        ref = wh.table(table).branch(on_branch).create_tag(name, version, max_age=max_age)
    _done(ctx, table, ref, f"Tagged version {ref.version} of '{table}' as '{name}'.")


@tag.command("list")
@click.argument("table")
@click.pass_obj
def tag_list(ctx: Context, table: str) -> None:
    """List the tags of TABLE."""
    with ctx.connect() as wh:
        refs = wh.table(table).tags()
    _listing(ctx, table, refs, "tag")


@tag.command("delete")
@click.argument("table")
@click.argument("name")
@click.pass_obj
def tag_delete(ctx: Context, table: str, name: str) -> None:
    """Delete tag NAME of TABLE."""
    with ctx.connect() as wh:
        wh.table(table).delete_tag(name)
    _deleted(ctx, table, name, "tag")


def _deleted(ctx: Context, table: str, name: str, kind: str) -> None:
    ctx.out.result(
        {"table": table, "deleted": name, "kind": kind},
        lambda c: c.print(f"Deleted {kind} '{name}' of '{table}'."),
    )


def _as_dict(ref: Ref) -> dict[str, object]:
    return {**dataclasses.asdict(ref), "expires_at": ref.expires_at}


def _done(ctx: Context, table: str, ref: Ref, message: str) -> None:
    ctx.out.result({"table": table, **_as_dict(ref)}, lambda c: c.print(message))


def _listing(ctx: Context, table: str, refs: list[Ref], kind: str) -> None:
    def render(console: Console) -> None:
        grid = RichTable(title=f"{kind}es of {table}" if kind == "branch" else f"tags of {table}")
        heads = ["name", "version", "parent", "fork version", "created"]
        for h in heads + (["expires"] if kind == "tag" else []):
            grid.add_column(h)
        for r in refs:
            row = [r.name, str(r.version), r.parent or "-",
                   "-" if r.fork_version is None else str(r.fork_version), r.created_at]  # fmt: skip
            grid.add_row(*row, *([r.expires_at or "never"] if kind == "tag" else []))
        console.print(grid)

    ctx.out.result({"table": table, f"{kind}es" if kind == "branch" else "tags":
                    [_as_dict(r) for r in refs]}, render)  # fmt: skip
