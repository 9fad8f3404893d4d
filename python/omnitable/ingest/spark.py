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

from omnitable._failpoints import failpoint
from omnitable.catalog.records import ColumnRecord
from omnitable.exceptions import CommitOutcomeUnknown, ValidationError
from omnitable.format.fs import delete_quietly, resolve_location
from omnitable.format.writer import WriteOptions, new_id, write_fragment
from omnitable.ingest.conform import Conformer
from omnitable.ingest.ids import IdClaim, check_existing, check_reserved, commit_append
from omnitable.ingest.local import FragmentCutter, append_request
from omnitable.vocabulary.descriptors import FragmentDescriptor
from omnitable.vocabulary.names import ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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

    conformer = Conformer(table.name, snap.user_columns)
    conformer.conform(_empty_arrow(df))  # names/types checked on the driver before any job
    supplied = ROW_ID in df.columns
    catalog = table._catalog
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
        failpoint("spark_ingest.written")
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
            ids, id_range = _written_ids(table, snap, fragments, df.sparkSession)
            claim = IdClaim(snap.version, spark_ids=ids, bounds=id_range)
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


def _written_ids(
    table: Table, snap: Snapshot, fragments: list[FragmentDescriptor], spark: SparkSession
) -> tuple[DataFrame, tuple[int, int]]:
    """The supplied ids as written (the id files of ``fragments``) and their bounds (from the
    files' statistics), after checking them for nulls and duplicates: the checks and the commit
    see exactly what was written, even if the source DataFrame would give other rows when run
    again, and the source runs once.

    Raises:
        ValidationError: null or duplicate ids (the caller deletes the written files).
    """
    from pyspark.sql import functions as F

    files = [f for fr in fragments for f in fr.files if ROW_ID in f.columns and f.row_count]
    if any(f.columns[ROW_ID].null_count for f in files):
        raise ValidationError(f"Cannot append: the DataFrame has rows with a null {ROW_ID}")
    bounds = [b for f in files if (b := f.columns[ROW_ID].int_bounds()) is not None]
    physical = snap.column(ROW_ID).physical_name
    uris = [table.location.child_uri(f.path) for f in files]
    ids = spark.read.parquet(*uris).select(F.col(physical).alias(ROW_ID))
    dupes = ids.groupBy(ROW_ID).count().where(F.col("count") > 1).limit(5).collect()
    if dupes:
        raise ValidationError(
            f"Cannot append: duplicate {ROW_ID} values in the DataFrame, e.g. "
            f"{sorted(int(r[0]) for r in dupes)}"
        )
    return ids, (min(b[0] for b in bounds), max(b[1] for b in bounds))


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
