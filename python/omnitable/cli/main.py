"""The ``omnitable`` command: one click group that only wires commands.

Errors map to exit codes in one place: validation 2, not found 3, commit conflict 4, other
OmniTable errors 1, unexpected errors 70 (traceback only with ``--verbose``).
"""

from __future__ import annotations

import sys
import traceback

import click

from omnitable.cli import (
    backfill_cmd,
    catalog_cmd,
    dataops_cmd,
    demo_cmd,
    govern_cmd,
    namespace_cmd,
    refs_cmd,
    runs_cmd,
    settings_cmd,
    tables_cmd,
    views_cmd,
)
from omnitable.cli.context import Context
from omnitable.cli.output import Output
from omnitable.exceptions import CommitConflict, NotFoundError, OmniTableError, ValidationError

EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ValidationError, 2),
    (NotFoundError, 3),
    (CommitConflict, 4),
    (OmniTableError, 1),
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-w",
    "--warehouse",
    envvar="OMNITABLE_WAREHOUSE",
    default=None,
    help="Warehouse directory or catalog URL (default ./omnitable-warehouse; "
    "env OMNITABLE_WAREHOUSE).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks for unexpected errors.")
@click.version_option(package_name="omnitable")
@click.pass_context
def cli(ctx: click.Context, warehouse: str | None, as_json: bool, verbose: bool) -> None:
    """OmniTable: logical wide tables for LLM and ML training data."""
    ctx.obj = Context(warehouse, Output(as_json), verbose)


for command in (
    backfill_cmd.backfill,
    backfill_cmd.status,
    runs_cmd.runs,
    demo_cmd.demo,
    settings_cmd.settings_command,
    tables_cmd.tables,
    tables_cmd.show,
    dataops_cmd.delete,
    dataops_cmd.history,
    dataops_cmd.update,
    dataops_cmd.upsert,
    dataops_cmd.lookup,
    dataops_cmd.rollback,
    dataops_cmd.revert,
    dataops_cmd.retire,
    dataops_cmd.restore,
    dataops_cmd.rename,
    govern_cmd.govern,
    catalog_cmd.upgrade_catalog_command,
    refs_cmd.branch,
    refs_cmd.tag,
    namespace_cmd.namespace,
    views_cmd.view,
    views_cmd.access_log,
):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code instead of raising (also used by tests)."""
    verbose = "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:])
    out = Output("--json" in (argv or sys.argv[1:]))
    try:
        cli.main(args=argv, prog_name="omnitable", standalone_mode=False)
    except click.exceptions.Abort:
        out.error("aborted")
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except OmniTableError as exc:
        out.error(str(exc))
        if verbose:
            traceback.print_exc()
        return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))
    except Exception as exc:  # the one place unexpected errors become exit codes
        out.error(f"unexpected {type(exc).__name__}: {exc}")
        if verbose:
            traceback.print_exc()
        else:
            out.err.print("(run with --verbose for the traceback)")
        return 70
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
