"""Distributed ingest of a Spark DataFrame.

Spark tasks (Python workers) conform their partition, cut it into fragments and write the column
files; they return fragment descriptors and never touch the catalog. The driver commits once.
Ids: the driver reserves ``partitions << ID_SHIFT`` ids up front; a task numbers its rows from
``base + (partition << ID_SHIFT)``, so ids are unique without coordination (gaps are allowed).
Task retries and speculative attempts write uniquely named files; only the descriptors of the
successful attempts reach the driver, the rest are orphans for garbage collection.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from omnitable.catalog.records import ROW_ID, ColumnRecord
from omnitable.exceptions import CommitOutcomeUnknown, ValidationError
from omnitable.format.descriptors import FragmentDescriptor
from omnitable.format.fs import delete_quietly, resolve_location
from omnitable.format.writer import WriteOptions, new_id, write_fragment
from omnitable.ingest.conform import Conformer
from omnitable.ingest.ids import IdClaim, check_existing, check_reserved, commit_append
from omnitable.ingest.local import FragmentCutter, append_request

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from omnitable.catalog.snapshot import Snapshot
    from omnitable.table import Table

ID_SHIFT = 33  # up to 8.6e9 rows per partition


def append_spark(
    table: Table,
    snap: Snapshot,
    df: DataFrame,
    append_name: str,
    old: list[Any],
    options: WriteOptions,
) -> int:
    """Append a Spark DataFrame as one batch; see the module doc."""
    from pyspark.sql import functions as F

    conformer = Conformer(table.name, snap.user_columns)
    conformer.conform(_empty_arrow(df))  # names/types checked on the driver before any job
    supplied = ROW_ID in df.columns
    catalog = table._catalog
    if supplied:
        bad = df.where(F.col(ROW_ID).isNull()).limit(1).count()
        if bad:
            raise ValidationError(f"Cannot append: the DataFrame has rows with a null {ROW_ID}")
        dupes = (
            df.groupBy(ROW_ID).count().where(F.col("count") > 1).limit(5).select(ROW_ID).collect()
        )
        if dupes:
            raise ValidationError(
                f"Cannot append: duplicate {ROW_ID} values in the DataFrame, e.g. "
                f"{[r[0] for r in dupes]}"
            )
    partitions = df.rdd.getNumPartitions()
    id_base = (
        0 if supplied else catalog.reserve_row_ids(table.record, max(1, partitions) << ID_SHIFT)
    )
    batch_id = new_id()
    spec = json.dumps(
        {
            "root": table.warehouse.root.uri,
            "location": table.record.location,
            "table": table.name,
            "columns": [asdict(c) for c in snap.user_columns],
            "group_of": {c.name: c.group_name for c in snap.columns},
            "physical": {c.name: c.physical_name for c in snap.columns},
            "append_name": append_name,
            "batch_id": batch_id,
            "options": asdict(options),
            "id_base": id_base,
            "supplied": supplied,
        }
    )
    run_id = catalog.start_run(
        table.record, "ingest", {"batch": append_name, "engine": "spark", "partitions": partitions}
    )
    location = table.location
    fragments: list[FragmentDescriptor] = []
    try:
        rows = df.mapInArrow(lambda it: _write_partition(spec, it), "descriptor string").collect()
        fragments = [FragmentDescriptor.from_json(r.descriptor) for r in rows]
        if not fragments:
            empty = conformer.target_schema().empty_table()
            fragments = [
                write_fragment(
                    location,
                    append_name,
                    batch_id,
                    empty,
                    json.loads(spec)["group_of"],
                    json.loads(spec)["physical"],
                    options,
                )
            ]
        rows_total = sum(f.row_count for f in fragments)
        id_range = None
        old_ids = {b.batch_id for b in old}
        if supplied and rows_total:
            agg = df.agg(F.min(ROW_ID), F.max(ROW_ID)).first()
            assert agg is not None
            id_range = (int(agg[0]), int(agg[1]))
            claim = IdClaim(snap.version, spark_ids=df.select(ROW_ID), bounds=id_range)
            check_existing(table, snap, claim, old_ids)
        else:
            if not supplied:
                check_reserved(fragments, id_base, id_base + (max(1, partitions) << ID_SHIFT) - 1)
            claim = IdClaim.generated(fragments, snap.version)
        req = append_request(
            snap, batch_id, append_name, old_ids, fragments, id_range, run_id, "spark"
        )
        version = commit_append(table, req, claim)
    except BaseException as exc:
        if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
            delete_quietly(
                location.fs, [location.child_path(f.path) for fr in fragments for f in fr.files]
            )
        catalog.fail_run(run_id, exc)
        raise
    catalog.finish_run(run_id, "succeeded", {"rows": rows_total, "version": version})
    return version


def _empty_arrow(df: DataFrame) -> pa.Table:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema).empty_table()


def _write_partition(spec_json: str, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark Python worker: write this partition's fragments, yield descriptors."""
    from pyspark import TaskContext

    spec = json.loads(spec_json)
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    location = resolve_location(spec["root"]).join(spec["location"])
    options = WriteOptions(**spec["options"])
    conformer = Conformer(spec["table"], [ColumnRecord(**c) for c in spec["columns"]])
    cutter = FragmentCutter(options)
    seq = partition << 24
    next_id = spec["id_base"] + (partition << ID_SHIFT)
    limit = spec["id_base"] + ((partition + 1) << ID_SHIFT)

    def emit(table: pa.Table) -> pa.RecordBatch:
        nonlocal next_id, seq
        if not spec["supplied"]:
            if next_id + table.num_rows > limit:
                raise ValidationError(
                    f"Cannot ingest partition {partition}: more than 2**{ID_SHIFT} rows"
                )
            ids = pa.array(np.arange(next_id, next_id + table.num_rows, dtype=np.int64))
            next_id += table.num_rows
            table = table.add_column(0, ROW_ID, ids)
        else:
            table = table.select([ROW_ID] + [c for c in table.column_names if c != ROW_ID])
        desc = write_fragment(
            location,
            spec["append_name"],
            spec["batch_id"],
            table,
            spec["group_of"],
            spec["physical"],
            options,
            seq,
        )
        seq += 1
        return pa.RecordBatch.from_pydict({"descriptor": [desc.to_json()]})

    for batch in batches:
        if batch.num_rows == 0:
            continue
        for piece in cutter.add(conformer.conform(batch)):
            yield emit(piece)
    rest = cutter.finish()
    if rest is not None and rest.num_rows:
        yield emit(rest)
