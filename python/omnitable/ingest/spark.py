"""Distributed ingest of a Spark DataFrame.

Spark tasks (Python workers) conform their partition, cut it into fragments and write the column
files; they return fragment descriptors and never touch the catalog. The driver commits once.
Ids: the driver reserves ``partitions << ID_SHIFT`` ids up front; a task numbers its rows from
``base + (partition << ID_SHIFT)``, so ids are unique without coordination (gaps are allowed).
The partitions are counted by a job over no columns (the highest partition id holding rows), which
works on a classic and a Spark Connect session alike; a write job whose partitions turn out to
hold more is refused before it commits (``check_reserved``).
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
from omnitable.exceptions import ValidationError
from omnitable.format.fs import resolve_location
from omnitable.format.writer import WriteOptions, write_fragment
from omnitable.ingest.conform import Conformer
from omnitable.ingest.ids import IdClaim, check_reserved
from omnitable.ingest.local import BatchTarget, FragmentCutter, Written
from omnitable.vocabulary.descriptors import FragmentDescriptor
from omnitable.vocabulary.names import ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from omnitable.catalog.snapshot import Snapshot
    from omnitable.context import TableContext

ID_SHIFT = 33  # up to 8.6e9 rows per partition


class SparkWriter:
    """Writes a Spark DataFrame's partitions in Spark tasks (see the module doc)."""

    engine = "spark"

    def __init__(
        self, df: DataFrame, conformer: Conformer, partitions: int | None, id_base: int
    ) -> None:
        self._df, self._conformer = df, conformer
        self._partitions, self._id_base = partitions, id_base
        self._supplied = ROW_ID in df.columns

    @classmethod
    def prepare(cls, ctx: TableContext, snap: Snapshot, df: DataFrame) -> SparkWriter:
        """Check the DataFrame's names and types on the driver (before any job) and reserve
        the generated ids of every partition."""
        conformer = Conformer(ctx.name, snap.user_columns)
        conformer.conform(_empty_arrow(df))
        supplied = ROW_ID in df.columns
        partitions = None if supplied else _partition_count(df)  # supplied ids: nothing to reserve
        reserve = 0 if partitions is None else partitions << ID_SHIFT
        id_base = ctx.catalog.reserve_row_ids(ctx.record, reserve) if reserve else 0
        return cls(df, conformer, partitions, id_base)

    def describe(self) -> dict[str, Any]:
        counted = {} if self._partitions is None else {"partitions": self._partitions}
        return {"engine": "spark", **counted}

    def write(self, target: BatchTarget, files: list[str]) -> Written:
        ctx, snap = target.ctx, target.snap
        group_of = {c.name: c.group_name for c in snap.columns}
        physical = {c.name: c.physical_name for c in snap.columns}
        spec = {
            "root": ctx.root.uri,
            "location": ctx.record.location,
            "table": ctx.name,
            "columns": [asdict(c) for c in snap.user_columns],
            "group_of": group_of,
            "physical": physical,
            "append_name": target.append_name,
            "batch_id": target.batch_id,
            "options": asdict(target.options),
            "id_base": self._id_base,
            "supplied": self._supplied,
        }
        spec_json = json.dumps(spec)
        rows = self._df.mapInArrow(
            lambda it: _write_partition(spec_json, it), "descriptor string"
        ).collect()
        fragments = [FragmentDescriptor.from_json(r.descriptor) for r in rows]
        location = ctx.location
        files.extend(location.child_path(f.path) for fr in fragments for f in fr.files)
        failpoint("spark_ingest.written")
        if not fragments:
            empty = self._conformer.target_schema().empty_table()
            fragments = [write_fragment(location, target.append_name, target.batch_id, empty,
                                        group_of, physical, target.options)]  # fmt: skip
            files.extend(location.child_path(f.path) for f in fragments[0].files)
        rows_total = sum(f.row_count for f in fragments)
        if self._supplied and rows_total:
            ids, id_range = _written_ids(ctx, snap, fragments, self._df.sparkSession)
            claim = IdClaim(snap.version, spark_ids=ids, bounds=id_range)
            return Written(fragments, rows_total, claim, True, id_range)
        if self._partitions is not None:
            end = self._id_base + (self._partitions << ID_SHIFT) - 1
            check_reserved(fragments, self._id_base, end)
        return Written(fragments, rows_total, IdClaim.generated(fragments, snap.version), False)


def _written_ids(
    ctx: TableContext, snap: Snapshot, fragments: list[FragmentDescriptor], spark: SparkSession
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
    uris = [ctx.location.child_uri(f.path) for f in files]
    ids = spark.read.parquet(*uris).select(F.col(physical).alias(ROW_ID))
    dupes = ids.groupBy(ROW_ID).count().where(F.col("count") > 1).limit(5).collect()
    if dupes:
        raise ValidationError(
            f"Cannot append: duplicate {ROW_ID} values in the DataFrame, e.g. "
            f"{sorted(int(r[0]) for r in dupes)}"
        )
    return ids, (min(b[0] for b in bounds), max(b[1] for b in bounds))


def _partition_count(df: DataFrame) -> int:
    """Partitions of ``df`` up to the last one holding rows (at least 1), from a job over no
    columns: public API only (Spark Connect has no RDDs)."""
    from pyspark.sql import functions as F

    last = df.select(F.spark_partition_id().alias("p")).agg(F.max("p")).collect()[0][0]
    return 1 if last is None else int(last) + 1


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
            threads=1,  # the task's one core
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
