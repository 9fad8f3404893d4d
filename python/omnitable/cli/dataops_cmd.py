"""``omnitable delete|update|upsert|lookup|rollback|revert|retire|restore|rename|history TABLE ...``
(docs/dataops.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.cli.tables_cmd import short_summary
from omnitable.exceptions import ValidationError
from omnitable.vocabulary.filters import parse_filter

if TYPE_CHECKING:
    from omnitable import Table

FILTER_HELP = (
    "Rows to delete, in SQL-like syntax: comparisons (= != < <= > >=), IN (...), IS [NOT] "
    "NULL, AND, OR, NOT, parentheses; strings in single quotes, e.g. "
    "\"label = 'spam' AND score < 0.2\". NULL is not true: such rows are kept."
)


@click.command()
@click.argument("table")
@click.option("--where", "where", default=None, help=FILTER_HELP)
@click.option("--ids", default=None, help="Comma-separated _ai_unique_id_ values to delete.")
@click.option("--why", default=None, help="Reason recorded in the commit's summary.")
@click.pass_obj
def delete(ctx: Context, table: str, where: str | None, ids: str | None, why: str | None) -> None:
    """Delete rows of TABLE (deletion vectors; no data file is rewritten, time travel still
    sees them). Exactly one of --where and --ids."""
    if (where is None) == (ids is None):
        raise ValidationError("Cannot delete: give exactly one of --where and --ids")
    expr = parse_filter(where) if where is not None else None
    id_list = _ids(ids) if ids is not None else None
    with ctx.connect() as wh:
        result = wh.table(table).delete(expr, ids=id_list, why=why)
    data = {"table": table, "version": result.version, "rows": result.rows,
            "fragments": result.fragments}  # fmt: skip

    def render(console: Console) -> None:
        if result.version is None:
            console.print(f"No row of '{table}' matched; nothing was committed.")
        else:
            console.print(
                f"Deleted {result.rows} row(s) in {result.fragments} fragment(s) of '{table}': "
                f"version {result.version}."
            )

    ctx.out.result(data, render)


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ValidationError(
            f"Cannot delete: --ids must be comma-separated integers, got {text!r}"
        ) from exc


def _from_file(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--from FILE`` option: a Parquet, CSV or JSON-lines file holding ``what``."""
    return click.option(
        "--from",
        "source",
        required=True,
        type=click.Path(exists=True, dir_okay=False),
        help=f"Parquet, CSV or JSON-lines file with {what}.",
    )


def _names(columns: str | None) -> list[str] | None:
    """A ``--columns a,b`` value as names (None: not given)."""
    return [c.strip() for c in columns.split(",") if c.strip()] if columns else None


@click.command()
@click.argument("table")
@_from_file("_ai_unique_id_ and the new values")
@click.option("--columns", default=None, help="Comma-separated columns to update (default all).")
@click.option("--why", default=None, help="Reason recorded in the commit's summary.")
@click.pass_obj
def update(ctx: Context, table: str, source: str, columns: str | None, why: str | None) -> None:
    """Set columns of rows of TABLE from a file keyed by _ai_unique_id_ (only the updated
    columns of the touched fragments are written)."""
    data = _read_file(source)
    names = _names(columns)
    with ctx.connect() as wh:
        result = wh.table(table).update(data, names, why=why)
    payload = {"table": table, "version": result.version, "rows": result.rows,
               "fragments": result.fragments, "files": result.files,
               "bytes_written": result.bytes_written}  # fmt: skip
    ctx.out.result(
        payload,
        lambda console: console.print(
            f"Updated {result.rows} row(s) in {result.fragments} fragment(s) of '{table}' "
            f"({result.files} file(s), {result.bytes_written} bytes): version {result.version}."
        ),
    )


@click.command()
@click.argument("table")
@_from_file("the key columns and the values")
@click.option(
    "--policy",
    default="last_write_wins",
    show_default=True,
    help="first_write_wins, last_write_wins, append_list, or a 'module:function' reference.",
)
@click.option("--batch", default=None, help="Name of the batch of new keys (default generated).")
@click.option("--why", default=None, help="Reason recorded in the commit's summary.")
@click.pass_obj
def upsert(
    ctx: Context, table: str, source: str, policy: str, batch: str | None, why: str | None
) -> None:
    """Insert the new keys of a file into keyed TABLE and merge the existing ones under
    --policy, in one commit. Rejected rows (NULL or repeated keys, keys whose 64-bit hash
    another key holds, policy failures) go to the
    error table (written with Spark) and are counted; the exit status is 0 when the commit
    landed."""
    data = _read_file(source)
    with ctx.connect() as wh:
        result = wh.table(table).upsert(data, policy, append_name=batch, why=why)
    payload = {"table": table, "version": result.version, "inserted": result.inserted,
               "merged": result.merged, "unchanged": result.unchanged,
               "rejected": result.rejected.num_rows, "files": result.files,
               "bytes_written": result.bytes_written}  # fmt: skip

    def render(console: Console) -> None:
        done = "nothing changed" if result.version is None else f"version {result.version}"
        console.print(
            f"Upserted into '{table}': {result.inserted} inserted, {result.merged} merged, "
            f"{result.unchanged} unchanged, {result.rejected.num_rows} rejected; {done}."
        )

    ctx.out.result(payload, render)


@click.command()
@click.argument("table")
@click.argument("keys", nargs=-1, required=True)
@click.option("--columns", default=None, help="Comma-separated columns to show (default all).")
@click.option("--version", type=int, default=None, help="Read this version (default the head).")
@click.option(
    "--verify-keys",
    is_flag=True,
    help="Read the stored keys back and leave out rows whose key differs (a hash collision).",
)
@click.pass_obj
def lookup(
    ctx: Context,
    table: str,
    keys: tuple[str, ...],
    columns: str | None,
    version: int | None,
    verify_keys: bool,
) -> None:
    """Show the rows of keyed TABLE holding KEYS, found through the key index (no scan). A key
    of several columns is given as its values joined by commas, in key order."""
    names = _names(columns)
    with ctx.connect() as wh:
        t = wh.table(table)
        key = t.key or []
        given: list[Any] = [k.split(",") for k in keys] if len(key) > 1 else list(keys)
        if len(key) > 1 and any(len(g) != len(key) for g in given):
            raise ValidationError(
                f"Cannot look up rows of '{table}': its key is {key}; give each key as "
                f"{len(key)} comma-separated values"
            )
        if len(key) > 1:
            given = [tuple(g) for g in given]
        found = t.lookup(
            _typed_keys(t, key, given), names, version=version, verify_keys=verify_keys
        )
    rows = found.to_pylist()
    ctx.out.result(
        rows,
        lambda console: console.print(
            ctx.out.table(
                f"{len(rows)} of {len(keys)} key(s) in {table}",
                found.column_names,
                [list(r.values()) for r in rows],
            )
        ),
    )


def _typed_keys(t: Table, key: list[str], given: list[Any]) -> pa.Table | list[Any]:
    """Command-line key text as a table of the key columns' types (text converts by casting)."""
    if not key:
        return given  # not a keyed table: lookup says so
    columns = list(zip(*given, strict=True)) if len(key) > 1 else [given]
    schema = t.schema
    out = {}
    for name, values in zip(key, columns, strict=True):
        try:
            out[name] = pa.array(list(values), pa.string()).cast(schema.field(name).type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValidationError(
                f"Cannot look up rows of '{t.name}': key column '{name}' is "
                f"{schema.field(name).type}; {exc}"
            ) from exc
    return pa.table(out)


def _read_file(path: str) -> pa.Table:
    """A Parquet (.parquet), CSV (.csv) or JSON-lines (.json, .jsonl) file as a table."""
    suffix = path.rsplit(".", 1)[-1].lower()
    readers = {"parquet": pq.read_table, "csv": pa_csv.read_csv, "json": pa_json.read_json,
               "jsonl": pa_json.read_json}  # fmt: skip
    if suffix not in readers:
        raise ValidationError(f"Cannot read {path}: give a .parquet, .csv, .json or .jsonl file")
    try:
        return readers[suffix](path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValidationError(f"Cannot read {path}: {exc}") from exc


@click.command()
@click.argument("table")
@click.argument("version", type=int)
@click.option("--why", default=None, help="Reason recorded in the commit's summary.")
@click.pass_obj
def rollback(ctx: Context, table: str, version: int, why: str | None) -> None:
    """Make VERSION's state the head of TABLE, as a new commit (history kept)."""
    with ctx.connect() as wh:
        new = wh.table(table).rollback(version, why=why)
    ctx.out.result(
        {"table": table, "version": new, "to_version": version},
        lambda console: console.print(
            f"Rolled '{table}' back to version {version}: version {new}."
        ),
    )


@click.command()
@click.argument("table")
@click.argument("version", type=int)
@click.option(
    "--dependents",
    type=click.Choice(["fail", "stale"]),
    default="fail",
    show_default=True,
    help="When later backfills read what it wrote: fail, or revert and leave them stale.",
)
@click.option("--why", default=None, help="Reason recorded in the commit's summary.")
@click.pass_obj
def revert(ctx: Context, table: str, version: int, dependents: str, why: str | None) -> None:
    """Undo exactly commit VERSION of TABLE, keeping every later commit."""
    with ctx.connect() as wh:
        t = wh.table(table)
        new = t.revert(version, dependents=dependents, why=why)
        stale = t.history(1)[0].summary.get("stale", [])
    ctx.out.result(
        {"table": table, "version": new, "reverted": version, "stale": stale},
        lambda console: console.print(
            f"Reverted version {version} of '{table}': version {new}."
            + (f" Stale now (backfill them): {', '.join(stale)}." if stale else "")
        ),
    )


@click.command()
@click.argument("table")
@click.argument("column")
@click.pass_obj
def retire(ctx: Context, table: str, column: str) -> None:
    """Retire COLUMN of TABLE: hidden from reads and planning, data kept, restorable (a
    feature's output retires the feature)."""
    _change_column(ctx, table, lambda t: t.retire(column), f"Retired '{column}' of '{table}'")


@click.command()
@click.argument("table")
@click.argument("column")
@click.pass_obj
def restore(ctx: Context, table: str, column: str) -> None:
    """Restore retired COLUMN of TABLE (with the other outputs of its feature)."""
    _change_column(ctx, table, lambda t: t.restore(column), f"Restored '{column}' of '{table}'")


@click.command()
@click.argument("table")
@click.argument("column")
@click.argument("new_name")
@click.pass_obj
def rename(ctx: Context, table: str, column: str, new_name: str) -> None:
    """Rename raw COLUMN of TABLE to NEW_NAME (catalog only; earlier versions keep the old
    name)."""
    done = f"Renamed '{column}' of '{table}' to '{new_name}'"
    _change_column(ctx, table, lambda t: t.rename_column(column, new_name), done)


def _change_column(ctx: Context, table: str, change: Callable[[Table], int], done: str) -> None:
    """Run ``change`` on TABLE and report the new version and the retired columns."""
    with ctx.connect() as wh:
        t = wh.table(table)
        version = change(t)
        retired = t.retired()
    data = {"table": table, "version": version, "retired": retired}
    ctx.out.result(
        data,
        lambda console: console.print(
            f"{done}: version {version}. Retired columns: {', '.join(retired) or 'none'}."
        ),
    )


@click.command()
@click.argument("table")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="How many versions to list, newest first.")  # fmt: skip
@click.option("--branch", default="main", show_default=True,
              help="Branch whose history (with the commits it forked from) to list.")  # fmt: skip
@click.pass_obj
def history(ctx: Context, table: str, limit: int, branch: str) -> None:
    """List TABLE's versions, newest first: operation, time and summary."""
    with ctx.connect() as wh:
        rows: list[dict[str, Any]] = [
            {"version": h.version, "branch": h.branch, "op": h.op, "time": h.time,
             "summary": h.summary, "expired": h.expired}
            for h in wh.table(table).branch(branch).history(limit)
        ]  # fmt: skip

    def render(console: Console) -> None:
        console.print(
            ctx.out.table(
                f"History of {table}",
                ["version", "op", "time", "summary"],
                [
                    [
                        f"{r['version']}{' (expired)' if r['expired'] else ''}",
                        r["op"],
                        r["time"],
                        short_summary(r["summary"]),
                    ]
                    for r in rows
                ],
            )
        )

    ctx.out.result(rows, render)
