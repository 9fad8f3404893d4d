"""``omnitable upgrade-catalog``: upgrade the warehouse's catalog schema in place."""

from __future__ import annotations

import click
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.warehouse import upgrade_catalog


@click.command(name="upgrade-catalog")
@click.pass_obj
def upgrade_catalog_command(ctx: Context) -> None:
    """Upgrade the catalog (-w) to this release's schema, in one transaction. Clients of the
    older release refuse the upgraded catalog: upgrade them together."""
    old, new = upgrade_catalog(ctx.warehouse)

    def render(console: Console) -> None:
        if old == new:
            console.print(f"The catalog already has schema version {new}; nothing to do.")
        else:
            console.print(f"Upgraded the catalog from schema version {old} to {new}.")

    ctx.out.result({"from_version": old, "to_version": new}, render)
