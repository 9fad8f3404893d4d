"""Turning what users pass to ``append``/``add_columns`` into a stream of Arrow record batches.

Accepted: a pandas DataFrame, a pyarrow Table / RecordBatch / RecordBatchReader, a path, glob or
list of paths of Parquet (``.parquet``, ``.pq``) or JSON-lines (``.jsonl``, ``.ndjson``,
``.json``) files. Spark DataFrames are recognized here and handled by the Spark ingest path.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from omnitable.exceptions import CorruptInputError, ValidationError

PARQUET_SUFFIXES = (".parquet", ".pq")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
_SOURCE_BATCH_ROWS = 65_536


def is_spark_dataframe(data: Any) -> bool:
    cls = type(data)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")


def is_pandas_dataframe(data: Any) -> bool:
    cls = type(data)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pandas")


def record_batches(data: Any, schema_hint: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the record batches of ``data`` (see module doc).

    Args:
        schema_hint: target types, used to convert pandas columns without guessing.

    Raises:
        ValidationError: unsupported input, or paths that match no file.
        CorruptInputError: a file cannot be read (raised while iterating).
    """
    if is_pandas_dataframe(data):
        yield from _from_pandas(data, schema_hint).to_batches(max_chunksize=_SOURCE_BATCH_ROWS)
    elif isinstance(data, pa.Table):
        yield from data.to_batches(max_chunksize=_SOURCE_BATCH_ROWS)
    elif isinstance(data, pa.RecordBatch):
        yield data
    elif isinstance(data, pa.RecordBatchReader):
        yield from data
    elif isinstance(data, (str, os.PathLike)) or (
        isinstance(data, (list, tuple))
        and data
        and all(isinstance(p, (str, os.PathLike)) for p in data)
    ):
        for path in expand_paths(data):
            yield from _read_file(path)
    else:
        raise ValidationError(
            f"Cannot ingest data of type {type(data).__name__}: pass a pandas DataFrame, a pyarrow "
            "Table/RecordBatchReader, a Spark DataFrame, or a path/glob of .parquet/.jsonl files"
        )


def expand_paths(spec: str | os.PathLike[str] | list[Any] | tuple[Any, ...]) -> list[str]:
    items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if "://" in text:
            raise ValidationError(
                f"Cannot ingest '{text}': remote paths are read through Spark; use "
                "table.append(spark.read.parquet(...), ...) or a local path"
            )
        matches = sorted(glob.glob(os.path.expanduser(text), recursive=True))
        if not matches:
            raise ValidationError(f"Cannot ingest '{text}': no file matches that path or glob")
        for m in matches:
            if os.path.isdir(m):
                inner = sorted(
                    str(p)
                    for p in Path(m).rglob("*")
                    if p.suffix in PARQUET_SUFFIXES + JSONL_SUFFIXES
                )
                if not inner:
                    raise ValidationError(
                        f"Cannot ingest directory '{m}': it has no .parquet or .jsonl files"
                    )
                out.extend(inner)
            else:
                out.append(m)
    return out


def _from_pandas(df: Any, schema_hint: pa.Schema | None) -> pa.Table:
    fields = []
    if schema_hint is not None:
        names = set(schema_hint.names)
        fields = [schema_hint.field(str(c)) for c in df.columns if str(c) in names]
    try:
        if fields and len(fields) == len(df.columns):
            return pa.Table.from_pandas(df, schema=pa.schema(fields), preserve_index=False)
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError) as exc:
        from omnitable.exceptions import SchemaMismatchError

        raise SchemaMismatchError(
            f"Cannot convert the pandas DataFrame to the table's types: {exc}"
        ) from exc


def _read_file(path: str) -> Iterator[pa.RecordBatch]:
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        try:
            pf = pq.ParquetFile(path)
            yield from pf.iter_batches(batch_size=_SOURCE_BATCH_ROWS)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptInputError(f"Cannot read Parquet file '{path}': {exc}") from exc
    elif lower.endswith(JSONL_SUFFIXES):
        try:
            table = pajson.read_json(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptInputError(f"Cannot read JSON-lines file '{path}': {exc}") from exc
        yield from table.to_batches(max_chunksize=_SOURCE_BATCH_ROWS)
    else:
        raise ValidationError(
            f"Cannot ingest '{path}': unknown file type; use .parquet/.pq or .jsonl/.ndjson/.json"
        )
