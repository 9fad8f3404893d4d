"""Feature definitions: what a feature is (inputs, outputs, logic, version, preferences).

A feature is registered once per table (``Table.register``) and can then be computed by any
process: pandas features are stored as an importable reference (``module:qualname``) checked at
registration, plus a fingerprint of their code; a pandas feature another process cannot import
(defined in a notebook cell, a script's ``__main__``, a closure, a lambda) is stored by value,
pickled (:mod:`omnitable.features.payload`); SQL features store their expression.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pyarrow as pa

from omnitable.exceptions import ValidationError
from omnitable.features import payload as pickled
from omnitable.format.fs import Location
from omnitable.vocabulary.types import parse_type_spec, to_ddl

FEATURE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
Prefer = Literal["cpu", "gpu"]
Kind = Literal["pandas", "sql"]


@dataclass(frozen=True)
class Feature:
    """A feature definition (see :func:`feature` and :func:`sql_feature`).

    Attributes:
        name: unique within a table; also the column group its outputs are stored in.
        inputs: columns read (raw columns or other features' outputs).
        outputs: output column name → Spark DDL type.
        version: bump it whenever the logic changes; outputs computed by another version are stale.
        kind: "pandas" (vectorized Python over pandas Series) or "sql" (Spark SQL expression).
        prefer: execution preference, "cpu" or "gpu".
        options: isolation and resource hints (timeout_s, memory_mb, batch_rows, isolation);
            a model feature's ``model`` (name@version), ``batch_size``, its store's
            ``model_storage_options`` (references only) and, once registered,
            ``model_sha256``, ``model_path``, ``model_kind``, ``model_framework``.
        payload: for a pandas feature stored by value, its pickled code's file, hash and
            recorded environment (:func:`omnitable.features.payload.pickle_function`).
    """

    name: str
    inputs: tuple[str, ...]
    outputs: dict[str, str]
    version: str
    kind: Kind
    prefer: Prefer = "cpu"
    options: dict[str, Any] = field(default_factory=dict)
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    expr: str | None = None
    ref: str | None = None
    code_fingerprint: str = ""
    payload: dict[str, Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            raise ValidationError(f"Cannot call feature '{self.name}': it is a {self.kind} feature")
        return self.fn(*args, **kwargs)

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    def output_types(self) -> dict[str, pa.DataType]:
        return {name: parse_type_spec(ddl, name) for name, ddl in self.outputs.items()}

    def definition(self) -> dict[str, Any]:
        """JSON document stored in the catalog's ``features.definition``."""
        extra = {"payload": dict(self.payload)} if self.payload is not None else {}
        return {
            "name": self.name,
            "inputs": list(self.inputs),
            "outputs": dict(self.outputs),
            "version": self.version,
            "kind": self.kind,
            "prefer": self.prefer,
            "options": dict(self.options),
            "expr": self.expr,
            "ref": self.ref,
            **extra,
        }

    @classmethod
    def from_definition(cls, d: Mapping[str, Any], fingerprint: str) -> Feature:
        return cls(
            name=d["name"],
            inputs=tuple(d["inputs"]),
            outputs=dict(d["outputs"]),
            version=d["version"],
            kind=d["kind"],
            prefer=d.get("prefer", "cpu"),
            options=dict(d.get("options") or {}),
            expr=d.get("expr"),
            ref=d.get("ref"),
            code_fingerprint=fingerprint,
            payload=dict(d["payload"]) if d.get("payload") else None,
        )

    def with_inputs(self, inputs: tuple[str, ...]) -> Feature:
        return dataclasses.replace(self, inputs=inputs)

    def load(self, location: Location | None = None, allow_version_drift: bool = False) -> Feature:
        """This feature with its function: imported from ``ref``, or, for a feature stored by
        value, unpickled from its payload in the table directory ``location`` after checking the
        file's hash and this environment (``allow_version_drift``: run with other library
        ``major.minor`` versions than recorded; see :mod:`omnitable.features.payload`).

        Raises:
            ValidationError: the code cannot be loaded, differs from the registered code, or
                this environment cannot run it.
        """
        if self.kind != "pandas" or self.fn is not None:
            return self
        if self.payload is not None:
            if location is None:
                raise ValidationError(
                    f"Cannot load feature '{self.id}': its code is pickled in the table directory"
                )
            unpickled = pickled.load_function(location, self.payload, self.id, allow_version_drift)
            return dataclasses.replace(self, fn=unpickled)
        if not self.ref:
            raise ValidationError(f"Cannot load feature '{self.id}': it has no import reference")
        fn = resolve_ref(self.ref)
        if isinstance(fn, Feature):
            fn = fn.fn
        assert fn is not None
        if code_fingerprint(fn) != self.code_fingerprint:
            raise ValidationError(
                f"Cannot run feature '{self.id}': the code at {self.ref} differs from the code "
                "registered under this version; register it again with a new version"
            )
        return dataclasses.replace(self, fn=fn)


def feature(
    *,
    inputs: list[str],
    outputs: Mapping[str, str | pa.DataType],
    version: str,
    name: str | None = None,
    prefer: Prefer = "cpu",
    timeout_s: float | None = None,
    call_timeout_s: float | None = None,
    memory_mb: int | None = None,
    batch_rows: int | None = None,
    isolation: str = "auto",
    per_record: bool = False,
) -> Callable[[Callable[..., Any]], Feature]:
    """Decorator registering a vectorized pandas function as a feature definition.

    The function receives one pandas Series per input (in ``inputs`` order) and returns a Series
    (one output) or a DataFrame with one column per output, of the same length.

    ``per_record=True``: the function instead receives one record's input values (Python
    scalars, in ``inputs`` order) and returns that record's output, or for several outputs a
    tuple in output order or a mapping by name. Its bad records are then found one by one as
    they fail, without bisection: an exception, a record over ``timeout_s`` or a crash costs
    that record alone (docs/isolation.md, *Per-record functions*).

    Example::

        @omnitable.feature(inputs=["text"], outputs={"n_chars": "int"}, version="1")
        def n_chars(text):
            return text.str.len()

        @omnitable.feature(inputs=["text"], outputs={"n_words": "int"}, version="1",
                           per_record=True)
        def n_words(text):
            return len(text.split())
    """
    if not isinstance(per_record, bool):
        raise ValidationError(
            f"Cannot make a feature: per_record must be True or False, got {per_record!r}"
        )

    def wrap(fn: Callable[..., Any]) -> Feature:
        if not callable(fn):
            raise ValidationError(f"Cannot make a feature of {fn!r}: it is not callable")
        fname = str(name or getattr(fn, "__name__", ""))
        opts = {
            "timeout_s": timeout_s,
            "call_timeout_s": call_timeout_s,
            "memory_mb": memory_mb,
            "batch_rows": batch_rows,
            "isolation": isolation,
            "per_record": per_record or None,
        }
        return Feature(
            name=_check_name(fname),
            inputs=_check_inputs(fname, inputs),
            outputs=_check_outputs(fname, outputs),
            version=_check_version(fname, version),
            kind="pandas",
            prefer=_check_prefer(fname, prefer),
            options={k: v for k, v in opts.items() if v is not None},
            fn=fn,
            ref=f"{fn.__module__}:{fn.__qualname__}",
            code_fingerprint=code_fingerprint(fn),
        )

    return wrap


MODEL_OPTION = "model"  # options key of a model feature's "name@version"
MODEL_STORAGE_OPTION = "model_storage_options"  # its store's storage options (references)
AUTO = "auto"


def model_feature(
    *,
    model: str,
    inputs: list[str],
    outputs: Mapping[str, str | pa.DataType],
    version: str,
    batch_size: int | str = AUTO,
    prefer: Prefer = "cpu",
    name: str | None = None,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    isolation: str = "auto",
    storage_options: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Feature]:
    """Decorator making ``fn(model, *input_series)`` a feature that calls a stored model
    (docs/models.md, "Model features").

    ``model`` is ``"name@version"`` of the warehouse's model store; registration checks it exists
    and records its SHA-256 in the feature's options. Each Python worker loads the model once
    (verified by hash) and calls ``fn`` on micro-batches of ``batch_size`` rows (an int, or
    ``"auto"``: adapted while running). ``fn`` returns a Series / DataFrame as a pandas feature
    does, or an array-like (a NumPy array, list or torch tensor: one column per output).
    ``storage_options``: those of the model's store when its artifacts need them (credentials
    as ``env:NAME`` references, validated like ``ModelStore``'s): each worker resolves them from
    its own environment when it loads the model; they are part of the registered version.

    Example::

        @omnitable.model_feature(model="scorer@1", inputs=["x"], outputs={"p": "double"},
                                 version="1")
        def score(model, x):
            return model.predict(x.to_numpy()[:, None])
    """
    from omnitable.models.store import check_model_id, check_storage_options

    def wrap(fn: Callable[..., Any]) -> Feature:
        f = feature(
            inputs=inputs,
            outputs=outputs,
            version=version,
            name=name,
            prefer=prefer,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            isolation=isolation,
        )(fn)
        if not isinstance(model, str) or model.count("@") != 1:
            raise ValidationError(
                f"Cannot define model feature '{f.name}': model must be 'name@version' of a "
                f"registered model (wh.models.list()), got {model!r}"
            )
        check_model_id(*model.split("@"))
        if batch_size != AUTO and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValidationError(
                f"Cannot define model feature '{f.name}': batch_size must be 'auto' or a "
                f"positive int (rows per model call), got {batch_size!r}"
            )
        options = dict(f.options, **{MODEL_OPTION: model, "batch_size": batch_size})
        storage = check_storage_options(storage_options)
        if storage:
            options[MODEL_STORAGE_OPTION] = storage
        return dataclasses.replace(f, options=options)

    return wrap


def model_reference(f: Feature) -> str | None:
    """``name@version`` of the model a feature calls (None: not a model feature)."""
    ref = f.options.get(MODEL_OPTION)
    return ref if isinstance(ref, str) else None


def sql_feature(
    name: str,
    expr: str,
    output_type: str | pa.DataType,
    version: str,
    *,
    inputs: list[str] | None = None,
    prefer: Prefer = "cpu",
) -> Feature:
    """A feature computed by a Spark SQL expression over other columns (evaluated in the JVM).

    Its single output column is named ``name``. ``inputs`` defaults to the table columns the
    expression mentions (resolved at registration).
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ValidationError(f"Cannot define SQL feature '{name}': expr must be a SQL expression")
    outputs = _check_outputs(name, {name: output_type})
    fp = hashlib.sha256(json.dumps([expr.strip(), outputs]).encode()).hexdigest()
    return Feature(
        name=_check_name(name),
        inputs=_check_inputs(name, inputs) if inputs is not None else (),
        outputs=outputs,
        version=_check_version(name, version),
        kind="sql",
        prefer=_check_prefer(name, prefer),
        expr=expr.strip(),
        code_fingerprint=fp,
    )


def code_fingerprint(fn: Callable[..., Any]) -> str:
    """sha256 of a function's source (or bytecode when no source is available)."""
    target = inspect.unwrap(fn)
    try:
        text = textwrap.dedent(inspect.getsource(target))
        text = re.sub(r"^(\s*@.*\n)+", "", text)  # decorators (incl. version strings) excluded
        payload = text.encode()
    except (OSError, TypeError) as exc:
        code = getattr(target, "__code__", None)
        if code is None:
            raise ValidationError(f"Cannot fingerprint {fn!r}: not a Python function") from exc
        payload = code.co_code + repr(code.co_consts).encode()
    return hashlib.sha256(payload).hexdigest()


def resolve_ref(ref: str) -> Any:
    """Import ``module:qualname``."""
    module_name, _, qualname = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValidationError(
            f"Cannot import feature code '{ref}': {exc}; make the module importable (installed "
            "or on PYTHONPATH) in every process that runs backfills"
        ) from exc
    return obj


def storable(f: Feature) -> tuple[Feature, bytes | None]:
    """How a feature is stored at registration: by reference when its stored reference imports
    back to this very function in another process, else by value (the feature with its payload
    metadata and code fingerprint, and the payload's bytes to write).

    Raises:
        ValidationError: the function can be neither imported nor pickled.
    """
    if f.kind != "pandas" or f.payload is not None:
        return f, None
    assert f.ref is not None and f.fn is not None
    if _importable(f):
        return f, None
    data, meta = pickled.pickle_function(f.fn, f.name)
    return dataclasses.replace(f, payload=meta, code_fingerprint=meta["fingerprint"]), data


def _importable(f: Feature) -> bool:
    """Whether another process imports ``f.ref`` to this very function."""
    assert f.ref is not None
    module = f.ref.split(":", 1)[0]
    if module == "__main__" or "<locals>" in f.ref or "<lambda>" in f.ref:
        return False
    try:
        obj = resolve_ref(f.ref)
    except ValidationError:
        return False
    target = obj.fn if isinstance(obj, Feature) else obj
    return target is f.fn


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not FEATURE_NAME.fullmatch(name):
        raise ValidationError(
            f"Cannot define feature {name!r}: names are 1-64 letters, digits and '_', starting "
            "with a letter or '_'"
        )
    return name


def _check_inputs(name: str, inputs: Any) -> tuple[str, ...]:
    if (
        isinstance(inputs, str)
        or not isinstance(inputs, (list, tuple))
        or not inputs
        or not all(isinstance(i, str) for i in inputs)
    ):
        raise ValidationError(
            f"Cannot define feature '{name}': inputs must be a non-empty list of column names"
        )
    if len(set(inputs)) != len(inputs):
        raise ValidationError(f"Cannot define feature '{name}': inputs {inputs} repeat a column")
    return tuple(inputs)


def _check_outputs(name: str, outputs: Any) -> dict[str, str]:
    if not isinstance(outputs, Mapping) or not outputs:
        raise ValidationError(
            f"Cannot define feature '{name}': outputs must be a mapping {{column: type}}"
        )
    from omnitable.vocabulary.names import check_column_name

    return {check_column_name(k): to_ddl(parse_type_spec(v, k)) for k, v in outputs.items()}


def _check_version(name: str, version: Any) -> str:
    if not isinstance(version, str) or not version.strip() or len(version) > 64:
        raise ValidationError(
            f"Cannot define feature '{name}': version must be a short non-empty string like '1'"
        )
    return version


def _check_prefer(name: str, prefer: Any) -> Prefer:
    if prefer not in ("cpu", "gpu"):
        raise ValidationError(f"Cannot define feature '{name}': prefer must be 'cpu' or 'gpu'")
    return cast(Prefer, prefer)
