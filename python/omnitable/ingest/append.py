"""One append path for every input (docs/tables.md, appending).

:func:`append` checks the request, records the run, has a *writer* put the batch's fragments on
storage — :class:`LocalWriter` in this process (pandas, Arrow, files) or
:class:`~omnitable.ingest.spark.SparkWriter` in Spark tasks (a DataFrame) — then checks the ids
the batch claims once (supplied ids against the table; generated ones are reserved) and commits
once (:func:`~omnitable.ingest.ids.commit_append`). Whatever fails before the commit deletes
every file the writer wrote; an unknown commit outcome keeps them (the commit may reference them).
"""

from __future__ import annotations

from typing import Any, Literal

from omnitable.catalog.runs import RunScope
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import AlreadyExistsError, CommitOutcomeUnknown, ValidationError
from omnitable.format.fs import delete_quietly
from omnitable.format.writer import WriteOptions, new_id
from omnitable.ingest.ids import check_existing, commit_append
from omnitable.ingest.local import BatchTarget, BatchWriter, LocalWriter, append_request
from omnitable.ingest.sources import is_spark_dataframe
from omnitable.vocabulary.keys import table_key
from omnitable.vocabulary.names import ROW_ID, check_append_name


def append(
    ctx: TableContext,
    data: Any,
    append_name: str,
    mode: Literal["error", "replace"],
    options: WriteOptions,
) -> int:
    """Append ``data`` as batch ``append_name`` (see ``Table.append``); returns the version."""
    check_append_name(append_name)
    if mode not in ("error", "replace"):
        raise ValidationError(f"Cannot append: mode must be 'error' or 'replace', got {mode!r}")
    if table_key(ctx.record.properties) is not None:
        raise ValidationError(
            f"Cannot append to table '{ctx.name}': it is keyed by "
            f"{table_key(ctx.record.properties)}; add rows with upsert(), which keeps the key "
            "index and the keys unique"
        )
    snap = ctx.snapshot(scope=SnapshotScope(fragments=False, files=False))
    replaced = {b.batch_id for b in snap.batches if b.name == append_name}
    if replaced and mode == "error":
        raise AlreadyExistsError(
            f"Cannot append batch '{append_name}' to table '{ctx.name}': it already exists; "
            "use mode='replace' to replace it atomically"
        )
    if replaced:  # the fragments the commit removes
        batch = SnapshotScope(files=False, batches=frozenset({append_name}))
        snap = ctx.snapshot(version=snap.version, scope=batch)
    if is_spark_dataframe(data):
        from omnitable.ingest.spark import SparkWriter

        writer: BatchWriter = SparkWriter.prepare(ctx, snap, data)
    else:
        writer = LocalWriter(data)
    target = BatchTarget(ctx, snap, append_name, new_id(), options)
    with RunScope(
        ctx.catalog, ctx.record, "ingest", {"batch": append_name, **writer.describe()}
    ) as run:
        files: list[str] = []
        try:
            out = writer.write(target, files)
            if out.supplied:  # against the id files of every batch of the same version
                ids = SnapshotScope(columns=frozenset({ROW_ID}))
                check_existing(
                    ctx, ctx.snapshot(version=snap.version, scope=ids), out.claim, replaced
                )
            req = append_request(snap, target.batch_id, append_name, replaced, out.fragments,
                                 out.id_range, run.run_id, writer.engine)  # fmt: skip
            version = commit_append(ctx, req, out.claim)
        except BaseException as exc:
            if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
                delete_quietly(ctx.location.fs, files)
            raise
        run.metrics = lambda: {"rows": out.rows, "version": version}
    return version
