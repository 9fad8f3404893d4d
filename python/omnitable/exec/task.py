"""The Spark task of a backfill step (runs in Python workers, never touches the catalog).

Input: Arrow batches of one or more whole fragments, each fragment's rows contiguous and in
order (``_ai_fragment_``, ``_ai_row_offset_``), with ``_ai_unique_id_``, the step's input
columns, the values of its SQL features (computed in the JVM) and, for features being retried,
their current outputs. For every fragment the task computes the pandas features that need it —
inputs converted to pandas once per fragment and shared by every feature reading them, each
feature run through the record-level isolation wrapper in chunks of ``batch_rows`` — writes one
column file per feature, and yields one JSON descriptor per file with its failed records.
"""

from __future__ import annotations

import contextlib
import functools
import json
import resource
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.exceptions import CorruptInputError, NotFoundError, ValidationError
from omnitable.exec.escalation import TaskProgress
from omnitable.exec.inference import model_caller
from omnitable.features.definition import Feature, model_reference
from omnitable.format.fs import Location, resolve_location
from omnitable.format.writer import WriteOptions, write_column_file
from omnitable.isolation import IsolationPolicy, Mode, input_digest, run_isolated
from omnitable.isolation.engine import CallSizing, split
from omnitable.isolation.records import PerRecord
from omnitable.vocabulary.deletions import decode_vector
from omnitable.vocabulary.names import ROW_ID
from omnitable.vocabulary.types import to_arrow

FRAGMENT = "_ai_fragment_"
OFFSET = "_ai_row_offset_"
TYPE_ERROR_PREFIX = "_ai_type_error_"  # an SQL feature's value that did not convert, + inputs
DEFAULT_BATCH_ROWS = 65_536
DEFAULT_CALL_TIMEOUT_S = 120.0
_LOADED: dict[str, Feature] = {}
_PER_RECORD: OrderedDict[tuple[int, tuple[str, ...]], PerRecord] = OrderedDict()
_PER_RECORD_LOCK = threading.Lock()
_SIZING: weakref.WeakKeyDictionary[Callable[..., Any], CallSizing] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task of one chunk needs, shipped to executors as JSON with the task.

    Attributes:
        work: feature -> fragments to compute (fully, or only ``retry`` offsets).
        retry: feature -> fragment -> row offsets to recompute (other rows keep their values).
        isolation: ``auto`` | ``inprocess`` | ``subprocess`` | ``off`` (overrides features).
        progress: URI of the chunk's :class:`~omnitable.exec.escalation.TaskProgress` directory
            (the ``driver`` crash escalation), or None.
        escalate: features to run in the child process from the start (a worker died while
            computing them in an earlier job of this chunk).
        vectors: fragment -> its deletion vector as stored (fragments with deleted rows only):
            the reader sends only the live rows, whose outputs are scattered back to their
            offsets (deleted rows are NULL, never computed).
        allow_version_drift: features stored by value (pickled) load with other library
            ``major.minor`` versions than recorded (each worker checks its own environment).
    """

    root: str
    location: str
    features: list[Feature]
    work: dict[str, list[str]]
    retry: dict[str, dict[str, list[int]]]
    row_counts: dict[str, int]
    paths: dict[str, str]
    options: WriteOptions
    run_id: str
    isolation: str
    progress: str | None = None
    escalate: list[str] = field(default_factory=list)
    vectors: dict[str, str] = field(default_factory=dict)
    allow_version_drift: bool = False

    def to_json(self) -> str:
        """The JSON :func:`compute_partition` reads."""
        return json.dumps(
            {
                "root": self.root,
                "location": self.location,
                "run_id": self.run_id,
                "features": [
                    dict(f.definition(), fingerprint=f.code_fingerprint) for f in self.features
                ],
                "work": self.work,
                "retry": self.retry,
                "row_counts": self.row_counts,
                "paths": self.paths,
                "options": self.options.__dict__,
                "isolation": self.isolation,
                "progress": self.progress,
                "escalate": self.escalate,
                "vectors": self.vectors,
                "allow_version_drift": self.allow_version_drift,
            }
        )


def compute_partition(
    spec_json: str, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: see the module doc."""
    spec = json.loads(spec_json)
    location = resolve_location(spec["root"]).join(spec["location"])
    options = WriteOptions(**spec["options"])
    drift = bool(spec.get("allow_version_drift", False))
    features = [_load(d, location, drift) for d in spec["features"]]
    work = {name: set(ids) for name, ids in spec["work"].items()}
    retried = _previous_attempt_failed()
    escalated = set(spec.get("escalate", []))
    progress = TaskProgress(spec["progress"]) if spec.get("progress") else None
    fatal = _load_models(features)
    if fatal is not None:  # a row, not a task failure: Spark's task retries cannot help
        yield pa.RecordBatch.from_pydict({"descriptor": [json.dumps({"fatal": fatal})]})
        return
    for frag_id, table in _fragments(batches):
        live = _live_offsets(frag_id, spec, table)
        cache: dict[str, pd.Series] = {}
        for f in features:
            if frag_id not in work.get(f.name, set()):
                continue
            only = spec["retry"].get(f.name, {}).get(frag_id)
            marker = functools.partial(progress.batch, f.name, frag_id) if progress else None
            if live is not None and only is not None:  # offsets -> positions among live rows
                only = _positions(live, only)
            started = time.perf_counter()
            outputs, failures, computed = compute_feature(
                f, table, cache, spec["isolation"], retried or f.name in escalated, only, marker
            )
            seconds = time.perf_counter() - started
            if live is not None:
                outputs, failures = _scatter(outputs, failures, live, spec["row_counts"][frag_id])
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
            descriptor = json.dumps(
                {
                    "feature": f.name,
                    "file": desc.to_dict(),
                    "errors": failures,
                    "computed": computed,
                    "metrics": {
                        "seconds": seconds if f.kind == "pandas" else 0.0,
                        "peak_memory_bytes": peak_memory_bytes(),
                        "retried": retried,
                    },
                }
            )
            if progress is not None:
                progress.completed(descriptor)
            yield pa.RecordBatch.from_pydict({"descriptor": [descriptor]})


def _load_models(features: list[Feature]) -> dict[str, str] | None:
    """Load the models of ``features`` (once per process: :func:`model_caller`); a corrupt or
    missing artifact, or storage options this worker cannot resolve, as ``{"error": class
    name, "message", "feature"}`` for the driver to raise
    (:func:`omnitable.exec.step_job.raise_fatal`), else None."""
    for f in features:
        if model_reference(f) is None:
            continue
        try:
            model_caller(f)
        except (CorruptInputError, NotFoundError, ValidationError) as exc:
            return {"error": type(exc).__name__, "message": str(exc), "feature": f.name}
    return None


def peak_memory_bytes() -> int:
    """The peak resident memory of this Python worker or of its largest child process (record
    isolation), in bytes (``getrusage``)."""
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(max(own, children)) * unit


def compute_feature(
    f: Feature,
    table: pa.Table,
    cache: dict[str, pd.Series],
    isolation: str,
    previous_attempt_failed: bool,
    only: list[int] | None,
    marker: Callable[[int], AbstractContextManager[None]] | None = None,
) -> tuple[pa.Table, list[dict[str, Any]], int]:
    """One feature over one fragment: (aligned outputs, failed records, records computed).

    ``marker(start)``, when given, wraps each in-process call of the batch starting at
    ``start`` (crash escalation by the driver, :class:`~omnitable.exec.escalation.TaskProgress`).
    """
    types = {name: to_arrow(ddl) for name, ddl in f.outputs.items()}
    if f.kind == "sql":
        return _sql_outputs(f, table, types)
    for col in f.inputs:
        if col not in cache:
            cache[col] = table.column(col).to_pandas()
    positions = np.arange(table.num_rows) if only is None else np.asarray(only, dtype=np.int64)
    policy = _policy(f, isolation)
    batch_rows = int(f.options.get("batch_rows") or DEFAULT_BATCH_ROWS)
    fn: Callable[..., Any] | None = f.fn
    if f.options.get("per_record") and fn is not None:
        fn = _per_record(fn, list(f.outputs))
    if model_reference(f) is not None:  # micro-batched model calls (exec/inference.py)
        caller = model_caller(f)
        fn = caller
        if not caller.auto:  # a chunk holds at least one model call
            batch_rows = max(batch_rows, caller.size)
    ids = table.column(ROW_ID).to_numpy()
    pieces: list[pa.Table] = []
    failures: list[dict[str, Any]] = []
    for start in range(0, max(len(positions), 1), batch_rows):
        chunk = positions[start : start + batch_rows]
        inputs = pd.DataFrame({c: cache[c].iloc[chunk].reset_index(drop=True) for c in f.inputs})
        assert fn is not None
        with marker(start) if marker is not None else contextlib.nullcontext():
            result = run_isolated(
                fn,
                inputs,
                output_names=list(f.outputs),
                policy=policy,
                previous_attempt_failed=previous_attempt_failed,
                sizing=_sizing(fn),
            )
        frame = pd.DataFrame(
            {
                n: pd.Series(c).reset_index(drop=True)
                for n, c in zip(result.output_names, result.columns, strict=True)
            }
        )
        converted, bad = convert_outputs(f, frame, types)
        pieces.append(converted)
        found = {x.position: {k: v for k, v in x.to_dict().items() if k != "position"}
                 for x in result.failures}  # fmt: skip
        for pos, (etype, message) in bad.items():  # failed records are NULL: never both
            digest = input_digest([inputs[c].iloc[pos] for c in f.inputs])
            found[pos] = _type_failure(etype, message, digest)
        for pos in sorted(found):
            offset = int(chunk[pos])
            failures.append(dict(found[pos], row_offset=offset, **{ROW_ID: int(ids[offset])}))
    computed = (
        pa.concat_tables(pieces)
        if pieces
        else pa.table({n: pa.array([], t) for n, t in types.items()})
    )
    if only is None:
        return computed, failures, len(positions)
    return _patch(table, types, positions, computed), failures, len(positions)


def _patch(
    table: pa.Table, types: dict[str, pa.DataType], positions: np.ndarray, computed: pa.Table
) -> pa.Table:
    """Current outputs with the rows at ``positions`` replaced by ``computed`` (a retry)."""
    index = np.full(table.num_rows, -1, dtype=np.int64)
    index[positions] = np.arange(len(positions))
    take_new = pa.array(np.where(index >= 0, index, 0))
    mask = pa.array(index >= 0)
    out = {}
    for name, t in types.items():
        old = table.column(name).cast(t).combine_chunks()
        new = computed.column(name).combine_chunks().take(take_new) if len(positions) else old
        out[name] = pc.if_else(mask, new, old)
    return pa.table(out)


def _per_record(fn: Callable[..., Any], outputs: list[str]) -> PerRecord:
    """``fn`` as a per-record function with these outputs (a function already wrapped by
    ``per_record`` is unwrapped first), one wrapper per function in this process, so that it
    is pickled for the child process once."""
    inner = fn.fn if isinstance(fn, PerRecord) else fn
    key = (id(inner), tuple(outputs))
    with _PER_RECORD_LOCK:
        hit = _PER_RECORD.get(key)
        if hit is None or hit.fn is not inner:
            hit = _PER_RECORD[key] = PerRecord(inner, outputs if len(outputs) > 1 else None)
            while len(_PER_RECORD) > 32:
                _PER_RECORD.popitem(last=False)
        _PER_RECORD.move_to_end(key)
        return hit


def _sizing(fn: Callable[..., Any]) -> CallSizing | None:
    """The adaptive call size of ``fn``'s batches in this process (kept across fragments and
    tasks of a reused worker); None when ``fn`` cannot be weakly referenced."""
    try:
        return _SIZING.setdefault(fn, CallSizing())
    except TypeError:
        return None


def _policy(f: Feature, isolation: str) -> IsolationPolicy:
    mode = cast(Mode, isolation if isolation != "auto" else f.options.get("isolation", "auto"))
    timeout = f.options.get("timeout_s")
    call_timeout = f.options.get("call_timeout_s")
    if timeout is not None and call_timeout is None:
        # a fragment chunk may hold 65k rows: cap the first call's n x timeout_s budget, so a
        # record that never returns costs minutes, not hours (a slow clean call is split, not
        # failed)
        call_timeout = max(DEFAULT_CALL_TIMEOUT_S, timeout)
    return IsolationPolicy(
        timeout_s=timeout,
        call_timeout_s=call_timeout,
        memory_mb=f.options.get("memory_mb"),
        mode=mode,
    )


def _previous_attempt_failed() -> bool:
    if "pyspark" not in sys.modules:  # not a Spark task: the python engine's local worker
        return False
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    ctx = TaskContext.get()
    return ctx is not None and ctx.attemptNumber() > 0


def _live_offsets(frag_id: str, spec: dict[str, Any], table: pa.Table) -> np.ndarray | None:
    """Check the task received the fragment's live rows in order; their offsets when some rows
    of the fragment are deleted (None: the fragment is whole)."""
    vector = spec.get("vectors", {}).get(frag_id)
    count = spec["row_counts"].get(frag_id)
    if vector is None or count is None:
        _check_complete(frag_id, table, count)
        return None
    live = np.flatnonzero(~decode_vector(vector, count, where=f"the vector of {frag_id}"))
    offsets = table.column(OFFSET).to_numpy()
    if not np.array_equal(offsets, live):
        raise ValidationError(
            f"Cannot backfill fragment {frag_id}: the task received {len(offsets)} rows out of "
            f"order or incomplete (expected its {len(live)} live rows in fragment order)"
        )
    return live


def _positions(live: np.ndarray, offsets: list[int]) -> list[int]:
    """Positions among the live rows of the live ones of ``offsets`` (deleted ones dropped)."""
    wanted = np.asarray(offsets, dtype=np.int64)
    pos = np.searchsorted(live, wanted)
    found = pos < len(live)
    found[found] = live[pos[found]] == wanted[found]
    return [int(p) for p in pos[found]]


def _scatter(
    outputs: pa.Table, failures: list[dict[str, Any]], live: np.ndarray, row_count: int
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """Outputs of the live rows placed at their offsets of a ``row_count``-row fragment (NULL
    at deleted rows), and failures renumbered from positions to offsets."""
    index = np.full(row_count, -1, dtype=np.int64)
    index[live] = np.arange(len(live))
    take = pa.array(index, mask=index < 0)
    placed = pa.table({n: outputs.column(n).take(take) for n in outputs.column_names})
    for failure in failures:
        failure["row_offset"] = int(live[failure["row_offset"]])
    return placed, failures


def _check_complete(frag_id: str, table: pa.Table, expected: int | None) -> None:
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


def convert_outputs(
    f: Feature, frame: pd.DataFrame, types: dict[str, pa.DataType]
) -> tuple[pa.Table, dict[int, tuple[str, str]]]:
    """A feature's outputs converted to its declared types, record by record where needed.

    Returns the outputs and, for every row with a value that does not convert (1.5 or 2**40
    for an ``int``, a string for a ``double``), ``position -> (exception type, message)``; such
    rows are NULL in every output. Rows that convert get exactly what a conversion of the whole
    column gives (the parts keep the column's pandas dtype).
    """
    bad: dict[int, tuple[str, str]] = {}
    arrays = {}
    for name, t in types.items():
        arrays[name], failed = _convert(frame[name].reset_index(drop=True), t, 0)
        for pos, exc in failed.items():
            message = f"Feature {f.id}: output '{name}' value cannot be converted to {t}: {exc}"
            bad.setdefault(pos, (type(exc).__name__, message[:1024]))
    if bad:
        mask = np.zeros(len(frame), dtype=bool)
        mask[list(bad)] = True
        nulls = pa.array(mask)
        arrays = {n: pc.if_else(nulls, pa.scalar(None, t), arrays[n]) for n, t in types.items()}
    return pa.table(arrays), bad


def _convert(values: pd.Series, t: pa.DataType, base: int) -> tuple[pa.Array, dict[int, Exception]]:
    """``values`` as an Arrow array of type ``t``; values that fail alone become NULL and are
    returned by position (``base`` + index), found by splitting failed parts."""
    try:
        return pa.Array.from_pandas(values, type=t), {}
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        if len(values) == 1:
            return pa.nulls(1, t), {base: exc}
    arrays, failed = [], {}
    for lo, hi in split(0, len(values), 8):
        part, errs = _convert(values.iloc[lo:hi], t, base + lo)
        arrays.append(part)
        failed.update(errs)
    return pa.concat_arrays(arrays), failed


def _type_failure(exception_type: str, message: str, digest: str) -> dict[str, Any]:
    return {
        "kind": "type",
        "exception_type": exception_type,
        "message": message,
        "traceback": "",
        "input_digest": digest,
    }


def _sql_outputs(
    f: Feature, table: pa.Table, types: dict[str, pa.DataType]
) -> tuple[pa.Table, list[dict[str, Any]], int]:
    """An SQL feature's values (computed in the JVM) and its records whose value did not
    convert to the declared type (see :func:`omnitable.exec.step_job.step_dataframe`)."""
    ((out, t),) = types.items()
    failures = []
    flags = table.column(TYPE_ERROR_PREFIX + out)
    ids = table.column(ROW_ID)
    for pos in np.flatnonzero(flags.is_valid().to_numpy(zero_copy_only=False)).tolist():
        flag = flags[pos].as_py()
        message = (
            f"Feature {f.id}: value {flag['value']!r} of ({f.expr}) cannot be converted to "
            f"{f.outputs[out]}"
        )
        digest = input_digest(list(flag["inputs"].values()))
        failures.append(
            dict(
                _type_failure("CAST_INVALID", message[:1024], digest),
                row_offset=pos,
                **{ROW_ID: ids[pos].as_py()},
            )
        )
    return pa.table({out: table.column(out).cast(t)}), failures, table.num_rows


def _load(d: dict[str, Any], location: Location, allow_version_drift: bool) -> Feature:
    """A feature of the spec with its function (imported, or unpickled from the table
    directory ``location``), loaded once per worker process."""
    payload = (d.get("payload") or {}).get("sha256", "")
    options = json.dumps(d.get("options") or {}, sort_keys=True)  # tuned per run
    key = f"{d['name']}@{d['version']}:{d['fingerprint']}:{payload}:{allow_version_drift}:{options}"
    if key not in _LOADED:
        f = Feature.from_definition(d, d["fingerprint"])
        _LOADED[key] = f.load(location, allow_version_drift)
    return _LOADED[key]
