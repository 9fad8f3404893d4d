"""Model features in the Python worker: the model loaded once per process, micro-batched calls,
OOM halving (docs/models.md, "Model features").

:func:`model_caller` returns, per worker process and model feature, a :class:`ModelCaller`: a
vectorized function ``caller(*input_series)`` for the isolation engine. It holds the model
(loaded once per process from the record in the feature's options and verified by SHA-256;
a mismatch raises :class:`~omnitable.exceptions.CorruptInputError` before anything is
computed) and cuts each batch it gets into calls of ``size`` rows. A call that runs out of
memory (``MemoryError``, or a ``RuntimeError`` saying "out of memory", as torch raises) is
retried in halves, and the size stays halved; only a single row that still runs out of memory
fails, and the isolation guard then isolates it like any other failing record.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from omnitable.features.definition import AUTO, MODEL_OPTION, MODEL_STORAGE_OPTION, Feature

if TYPE_CHECKING:  # imported when a model is used: plain pandas tasks skip the catalog
    from omnitable.models.store import ModelRecord

AUTO_START_ROWS = 256
"""First call size of ``batch_size="auto"``."""
AUTO_MAX_ROWS = 16_384
"""``"auto"`` never grows a call beyond this many rows."""
AUTO_FAST_S = 0.25
"""``"auto"`` doubles the call size after a full-size call faster than this."""

_MODELS: dict[str, Any] = {}  # SHA-256 -> the loaded model (this process)
_CALLERS: dict[str, ModelCaller] = {}  # feature id + model SHA-256 -> its caller
LOADS: dict[str, int] = {}  # SHA-256 -> loads in this process (tests and benchmarks read it)


def record_of(f: Feature) -> ModelRecord:
    """The model record a registered model feature's options carry."""
    from omnitable.models.store import ModelRecord

    o = f.options
    name, version = str(o[MODEL_OPTION]).split("@")
    return ModelRecord(
        name,
        version,
        o["model_sha256"],
        0,
        o.get("model_framework"),
        o["model_kind"],
        o["model_path"],
        "",
    )


def load_model(
    record: ModelRecord, prefer: str = "cpu", storage: dict[str, Any] | None = None
) -> Any:
    """The model of ``record``, loaded and verified once per process (cached by SHA-256).

    An ``object`` artifact is unpickled; a ``torch`` file goes through ``torch.load``; any other
    file or directory is passed as its verified local path. ``prefer="gpu"`` moves a torch
    module to CUDA when there is one, else warns and stays on CPU. ``storage``: the store's
    storage options (``env:NAME`` references, checked against the allowed prefixes here and
    resolved from this process's environment).

    Raises:
        ValidationError: a storage option is not allowed here or names an unset variable.
    """
    if record.sha256 in _MODELS:
        return _MODELS[record.sha256]
    from omnitable.models.store import check_storage_options, load_verified

    model = load_verified(record, check_storage_options(storage))
    if record.kind == "file" and record.framework == "torch":
        import torch

        model = torch.load(model, map_location="cpu", weights_only=False)
    model = _place(model, prefer, f"{record.name}@{record.version}")
    _MODELS[record.sha256] = model
    LOADS[record.sha256] = LOADS.get(record.sha256, 0) + 1
    return model


def _place(model: Any, prefer: str, ref: str) -> Any:
    if prefer != "gpu":
        return model
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    if torch is not None and torch.cuda.is_available():
        return model.to("cuda") if isinstance(model, torch.nn.Module) else model
    warnings.warn(
        f"Model {ref} prefers a GPU but this worker has none: running on CPU",
        RuntimeWarning,
        stacklevel=2,
    )
    return model


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory failure: ``MemoryError`` or torch's "out of memory" RuntimeError."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


@dataclass(eq=False)  # hashed by identity: the isolation engine keeps its call sizing per caller
class ModelCaller:
    """``fn(model, *inputs)`` as a vectorized function over micro-batches (module doc).

    ``size``: rows per model call now; ``auto``: adapt it (double after fast full-size calls up
    to ``AUTO_MAX_ROWS`` and below any size that ran out of memory); ``ceiling``: the largest
    size known to fit. Counters: ``calls`` (model calls), ``halvings``.
    """

    fn: Callable[..., Any]
    record: ModelRecord
    outputs: list[str]
    size: int
    auto: bool
    prefer: str = "cpu"
    storage: dict[str, Any] = field(default_factory=dict)  # storage options (references)
    ceiling: int | None = None
    calls: int = 0
    halvings: int = 0
    sizes: list[int] = field(default_factory=list)

    def __reduce__(self) -> Any:  # shipped to an isolation child: it loads the model itself
        return (_rebuild, (self.fn, self.record, self.outputs, self.size, self.auto, self.prefer,
                           self.storage))  # fmt: skip

    def __call__(self, *columns: pd.Series) -> Any:
        n = len(columns[0]) if columns else 0
        model = load_model(self.record, self.prefer, self.storage)
        if n == 0:
            return self._frame(self.fn(model, *columns), 0)
        parts: list[pd.DataFrame] = []
        lo = 0
        while lo < n:
            hi = min(n, lo + self.size)
            piece = [c.iloc[lo:hi].reset_index(drop=True) for c in columns]
            start = time.perf_counter()
            try:
                out = self._frame(self.fn(model, *piece), hi - lo)
            except Exception as exc:  # only OOM is handled here; others are re-raised
                if not is_oom(exc) or hi - lo == 1:
                    raise
                self.halvings += 1
                self.size = max(1, (hi - lo) // 2)
                self.ceiling = self.size
                continue  # retry the same rows in smaller calls
            self.calls += 1
            self.sizes.append(hi - lo)
            self._adapt(hi - lo, time.perf_counter() - start)
            parts.append(out)
            lo = hi
        frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        return frame if len(self.outputs) > 1 else frame[self.outputs[0]]

    def _adapt(self, rows: int, seconds: float) -> None:
        if not self.auto or rows < self.size or seconds >= AUTO_FAST_S:
            return
        limit = AUTO_MAX_ROWS if self.ceiling is None else self.ceiling
        self.size = min(self.size * 2, limit)

    def _frame(self, result: Any, n: int) -> pd.DataFrame:
        """``fn``'s result as a DataFrame of the outputs (left for the guard to check)."""
        if isinstance(result, pd.DataFrame):
            return result.reset_index(drop=True)
        if isinstance(result, pd.Series):
            return pd.DataFrame({self.outputs[0]: result.reset_index(drop=True)})
        if hasattr(result, "detach"):  # a torch tensor
            result = result.detach().cpu().numpy()
        values = np.asarray(result)
        if len(self.outputs) == 1:
            return pd.DataFrame({self.outputs[0]: list(values) if values.ndim > 1 else values})
        if values.ndim != 2 or values.shape[1] != len(self.outputs):
            raise ValueError(
                f"model feature returned an array of shape {values.shape}; expected "
                f"({n}, {len(self.outputs)}), one column per output {self.outputs}"
            )
        return pd.DataFrame(dict(zip(self.outputs, values.T, strict=True)))


def _rebuild(
    fn: Callable[..., Any],
    record: ModelRecord,
    outputs: list[str],
    size: int,
    auto: bool,
    prefer: str,
    storage: dict[str, Any],
) -> ModelCaller:
    return ModelCaller(fn, record, outputs, size, auto, prefer, storage)


def model_caller(f: Feature) -> ModelCaller:
    """The caller of model feature ``f`` in this process (created, and its model loaded, once).

    Raises:
        CorruptInputError: the model's artifact does not match its SHA-256.
        NotFoundError: the artifact is missing.
        ValidationError: its storage options cannot be resolved here (:func:`load_model`).
    """
    key = f"{f.id}:{f.code_fingerprint}:{f.options['model_sha256']}"
    caller = _CALLERS.get(key)
    if caller is None:
        assert f.fn is not None
        batch_size = f.options.get("batch_size", AUTO)
        auto = batch_size == AUTO
        record = record_of(f)
        storage = dict(f.options.get(MODEL_STORAGE_OPTION) or {})
        load_model(record, f.prefer, storage)  # fail the task now if the artifact is corrupt
        size = AUTO_START_ROWS if auto else int(batch_size)
        caller = ModelCaller(f.fn, record, list(f.outputs), size, auto, f.prefer, storage)
        _CALLERS[key] = caller
    return caller
