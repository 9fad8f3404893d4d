"""The Spark task of a backfill step (runs in Python workers, never touches the catalog).

Input: Arrow batches of one or more whole fragments, each fragment's rows contiguous and in
order (``_ai_fragment_``, ``_ai_row_offset_``), with the step's input columns and the values of
its SQL features (computed in the JVM). For every fragment the task computes the pandas features
that need it (inputs converted to pandas once per fragment and shared by every feature reading
them), writes one column file per feature, and yields one JSON descriptor per file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.exceptions import ValidationError
from omnitable.features.definition import Feature
from omnitable.format.fs import resolve_location
from omnitable.format.types import to_arrow
from omnitable.format.writer import WriteOptions, write_column_file

FRAGMENT = "_ai_fragment_"
OFFSET = "_ai_row_offset_"
_LOADED: dict[str, Feature] = {}


def step_spec(
    *,
    root: str,
    location: str,
    features: list[Feature],
    work: dict[str, list[str]],
    row_counts: dict[str, int],
    paths: dict[str, str],
    options: WriteOptions,
    run_id: str,
) -> str:
    """Everything a task needs, as JSON (shipped to executors with the task)."""
    return json.dumps(
        {
            "root": root,
            "location": location,
            "run_id": run_id,
            "features": [dict(f.definition(), fingerprint=f.code_fingerprint) for f in features],
            "work": work,
            "row_counts": row_counts,
            "paths": paths,
            "options": options.__dict__,
        }
    )


def compute_partition(
    spec_json: str, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: see the module doc."""
    spec = json.loads(spec_json)
    location = resolve_location(spec["root"]).join(spec["location"])
    options = WriteOptions(**spec["options"])
    features = [_load(d) for d in spec["features"]]
    work = {name: set(ids) for name, ids in spec["work"].items()}
    for frag_id, table in _fragments(batches):
        expected = spec["row_counts"].get(frag_id)
        if expected is None:
            raise ValidationError(f"Cannot backfill: task received unplanned fragment {frag_id}")
        offsets = table.column(OFFSET).to_numpy()
        if len(offsets) != expected or (
            len(offsets) and (offsets[0] != 0 or (offsets[1:] - offsets[:-1] != 1).any())
        ):
            raise ValidationError(
                f"Cannot backfill fragment {frag_id}: the task received {len(offsets)} rows out of "
                f"order or incomplete (expected {expected} rows in fragment order)"
            )
        pandas_cache: dict[str, pd.Series] = {}
        for f in features:
            if frag_id not in work[f.name]:
                continue
            outputs = _compute(f, table, pandas_cache)
            desc = write_column_file(
                location,
                frag_id,
                spec["paths"][frag_id],
                f.name,
                outputs,
                {},
                options,
                {o: f.version for o in f.outputs},
            )
            yield pa.RecordBatch.from_pydict(
                {"descriptor": [json.dumps({"feature": f.name, "file": desc.to_dict()})]}
            )


def _fragments(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, pa.Table]]:
    """Group a stream of batches into whole fragments (rows of a fragment are contiguous)."""
    current: str | None = None
    parts: list[pa.RecordBatch] = []
    done: set[str] = set()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        encoded = pc.dictionary_encode(batch.column(FRAGMENT))
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        starts = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist()]
        ends = [*starts[1:], batch.num_rows]
        for start, end in zip(starts, ends, strict=True):
            frag = encoded.dictionary[int(codes[start])].as_py()
            if frag != current:
                if current is not None:
                    done.add(current)
                    yield current, pa.Table.from_batches(parts)
                if frag in done:
                    raise ValidationError(
                        f"Cannot backfill: rows of fragment {frag} arrived non-contiguously"
                    )
                current, parts = frag, []
            parts.append(batch.slice(start, end - start))
    if current is not None:
        yield current, pa.Table.from_batches(parts)


def _compute(f: Feature, table: pa.Table, cache: dict[str, pd.Series]) -> pa.Table:
    types = {name: to_arrow(ddl) for name, ddl in f.outputs.items()}
    if f.kind == "sql":
        return pa.table({name: table.column(name).cast(t) for name, t in types.items()})
    args = []
    for col in f.inputs:
        if col not in cache:
            cache[col] = table.column(col).to_pandas()
        args.append(cache[col])
    assert f.fn is not None
    result = f.fn(*args)
    return outputs_to_arrow(f, result, table.num_rows, types)


def outputs_to_arrow(f: Feature, result: Any, n: int, types: dict[str, pa.DataType]) -> pa.Table:
    """Check a feature's return value and convert it to its declared output types."""
    names = list(types)
    if isinstance(result, pd.Series) and len(names) == 1:
        frame = pd.DataFrame({names[0]: result.reset_index(drop=True)})
    elif isinstance(result, pd.DataFrame):
        missing = [c for c in names if c not in result.columns]
        if missing:
            raise ValidationError(
                f"Feature {f.id} returned a DataFrame without output column(s) {missing}"
            )
        frame = result.reset_index(drop=True)
    else:
        raise ValidationError(
            f"Feature {f.id} must return a pandas Series (one output) or DataFrame (outputs "
            f"{names}), got {type(result).__name__}"
        )
    if len(frame) != n:
        raise ValidationError(f"Feature {f.id} returned {len(frame)} rows for {n} input rows")
    arrays = {}
    for name, t in types.items():
        try:
            arrays[name] = pa.Array.from_pandas(frame[name], type=t)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValidationError(
                f"Feature {f.id}: output '{name}' cannot be converted to {t}: {exc}"
            ) from None
    return pa.table(arrays)


def _load(d: dict[str, Any]) -> Feature:
    key = f"{d['name']}@{d['version']}:{d['fingerprint']}"
    if key not in _LOADED:
        _LOADED[key] = Feature.from_definition(d, d["fingerprint"]).load()
    return _LOADED[key]
