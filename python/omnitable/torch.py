"""PyTorch datasets over OmniTable tables (docs/training.md): :class:`TableDataset` (the loader)
and :class:`MmapDataset` (mmap exports). Needs torch:
``pip install 'omnitable[ml]'``. The logic lives in :mod:`omnitable.training`; this module only
adapts it to ``torch.utils.data``."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - exercised without torch only
    raise ImportError(
        "omnitable.torch needs PyTorch: pip install 'omnitable[ml]' (or any torch wheel)"
    ) from exc

from omnitable.exceptions import ValidationError
from omnitable.training.loader import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BUFFER_UNITS,
    DEFAULT_UNIT_ROWS,
    Batch,
    BatchLoader,
    Progress,
    SnapshotSource,
    column_numpy,
    merge_states,
    uniform_list_width,
)
from omnitable.training.mmap import read_schema

# -- TableDataset (loader) ----------------------------------------------------------------

Transform = Callable[[pa.RecordBatch], Any]


class TableDataset(IterableDataset):
    """Batches of a pinned table snapshot as an ``IterableDataset`` (docs/training.md, "Loader").

    Each item is one batch: a dict of column name to tensor (numeric and boolean columns,
    fixed-size lists of numbers as 2-D tensors; zero-copy where Arrow allows) or list (strings,
    variable-length lists, other types). Use ``DataLoader(dataset, batch_size=None)`` or
    :meth:`loader` (which also tracks progress across workers for :meth:`state_dict`). Every
    row is read exactly once per epoch across all ranks and workers; :meth:`set_epoch` picks the
    epoch (the shuffle order is a function of ``seed`` and the epoch).

    Args:
        table: an ``omnitable.Table``.
        columns: columns to return (default: all).
        version, tag, branch: the snapshot, pinned when the dataset is made (default: head).
        where: a pyarrow compute filter, as ``Table.read`` accepts.
        batch_size, shuffle, seed, drop_last: as their names say (drop_last: per shard).
        transform: called on each ``pyarrow.RecordBatch`` before collation (e.g. fitted
            preprocessing); may return a RecordBatch, a Table or a dict (numpy arrays in it
            become tensors).
        rank, world_size: this process's place in the world (default: torch.distributed when
            initialized, else 0 of 1).
        unit_rows, buffer_units: work-unit size and shuffle-buffer width (units).

    Raises:
        UnknownColumnError, NotFoundError, ValidationError.
    """

    def __init__(
        self,
        table: SnapshotSource,
        columns: list[str] | None = None,
        version: int | None = None,
        tag: str | None = None,
        branch: str | None = None,
        where: pc.Expression | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        transform: Transform | None = None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        unit_rows: int = DEFAULT_UNIT_ROWS,
        buffer_units: int = DEFAULT_BUFFER_UNITS,
    ) -> None:
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValidationError(
                "Cannot make a TableDataset: give both rank and world_size, or neither"
            )
        if transform is not None and not callable(transform):
            raise ValidationError(
                f"Cannot make a TableDataset: transform must be callable, got {transform!r}"
            )
        self.batches = BatchLoader(
            table, columns, version=version, tag=tag, branch=branch, where=where,
            batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
            unit_rows=unit_rows, buffer_units=buffer_units,
        )  # fmt: skip
        self.transform = transform
        self._rank, self._world = rank, world_size
        if rank is not None:
            self.world()  # validates
        self.epoch = 0
        self._resume: Progress | None = None
        self._progress = Progress(0)

    def world(self) -> tuple[int, int]:
        """(rank, world size): the explicit ones, else torch.distributed's, else (0, 1)."""
        if self._rank is not None and self._world is not None:
            rank, world = self._rank, self._world
        elif dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
        else:
            rank, world = 0, 1
        if (
            not isinstance(world, int)
            or world < 1
            or not isinstance(rank, int)
            or not 0 <= rank < world
        ):
            raise ValidationError(
                f"Cannot load a table: rank must be in [0, world_size), got rank={rank!r}, "
                f"world_size={world!r}"
            )
        return rank, world

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for a DataLoader worker: the rank and world size are fixed here (a spawned
        worker has no torch.distributed process group)."""
        state = dict(self.__dict__)
        state["_rank"], state["_world"] = self.world()
        return state

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next (its shuffle order); forgets a loaded state of another epoch."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValidationError(f"Cannot set the epoch: must be an integer >= 0, got {epoch!r}")
        self.epoch = epoch
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def __iter__(self) -> Iterator[Any]:
        base = self._begin()
        in_worker = get_worker_info() is not None
        for batch in self._shard(base):
            if not in_worker:
                self._progress.record(batch)
            if batch.data is not None:
                yield self.collate(batch.data)

    def loader(self, num_workers: int = 0, **kwargs: Any) -> TableLoader:
        """A ``DataLoader`` over this dataset (``batch_size=None``: the dataset batches) that
        records which rows were consumed, for an exact :meth:`state_dict` with workers."""
        return TableLoader(self, num_workers, kwargs)

    def state_dict(self, gather: bool = True) -> dict[str, Any]:
        """The rows consumed so far this epoch (docs/training.md, "Resume"). With
        torch.distributed initialized (and no explicit rank), every rank must call it: the
        ranks' states are gathered and merged (``gather=False``: this rank's own)."""
        local = self.batches.state(self._progress)
        if (
            not gather
            or self._rank is not None
            or not (dist.is_available() and dist.is_initialized())
        ):
            return local
        states: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(states, local)
        return merge_states(self.batches, states)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` (any world size, any number of workers): the next iteration
        reads exactly the rows it does not record as consumed, then later epochs start afresh.

        Raises:
            ValidationError: the state is of another table, snapshot, columns, filter or seed.
        """
        progress = self.batches.progress_of(state)
        self.epoch, self._resume = progress.epoch, progress
        self._progress = _copy(progress)

    def collate(self, batch: pa.RecordBatch) -> Any:
        """One batch as tensors (after ``transform``): a dict of column name -> tensor (or list,
        for columns that are not numbers). In a DataLoader worker the dict is a
        :class:`TensorBatch`, whose tensors share one buffer (one shared-memory segment per
        batch on the way to the main process instead of one per column)."""
        out = self.transform(batch) if self.transform is not None else batch
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()[0] if out.num_rows else None
        with warnings.catch_warnings():  # Arrow memory is read-only to numpy; tensors share it
            warnings.simplefilter("ignore", UserWarning)
            if isinstance(out, pa.RecordBatch):
                cols = {n: _tensor(c) for n, c in zip(out.schema.names, out.columns, strict=True)}
            elif isinstance(out, Mapping):
                cols = {
                    k: _numpy_tensor(v) if isinstance(v, np.ndarray) else v for k, v in out.items()
                }
            else:
                return out
        return TensorBatch.packed(cols) if get_worker_info() is not None else cols

    def _begin(self) -> Progress:
        """The progress this iteration starts from (a loaded state, once, else nothing)."""
        base = self._resume if self._resume is not None else Progress(self.epoch)
        self._resume = None
        self._progress = _copy(base)
        return base

    def _shard(self, base: Progress) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world = self.world()
        return self.batches.batches(
            base.epoch, rank=rank, world_size=world, worker=worker, num_workers=workers,
            progress=base,
        )  # fmt: skip


_ALIGN = 64  # bytes: each tensor of a packed batch starts at a multiple of this
_Layout = dict[str, tuple[int, int, Any, tuple[int, ...]]]  # name -> offset, bytes, dtype, shape


class TensorBatch(dict[str, Any]):
    """A batch (column name -> value) whose CPU tensors are views into ONE buffer.

    A DataLoader worker pickles each tensor it sends by moving its storage to a shared-memory
    segment and passing that segment's file descriptor to the main process; a batch of ten
    columns costs ten of each. A ``TensorBatch`` pickles as its buffer and the tensors' places
    in it (one segment), and unpickles as a ``TensorBatch`` of views into the received buffer:
    the same keys in the same order, shapes, dtypes and values. Values that are not CPU tensors
    are pickled as they are; a batch whose tensors were replaced pickles as a plain ``dict``.
    In every other respect it is a ``dict``."""

    __slots__ = ("_buffer", "_layout")
    _buffer: Any
    _layout: _Layout

    @classmethod
    def packed(cls, values: Mapping[str, Any]) -> TensorBatch:
        """``values`` with its CPU tensors copied into one buffer (the others kept)."""
        layout: _Layout = {}
        size = 0
        for name, v in values.items():
            if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.layout == torch.strided:
                nbytes = v.numel() * v.element_size()
                layout[name] = (size, nbytes, v.dtype, tuple(v.shape))
                size += -(-nbytes // _ALIGN) * _ALIGN
        buffer = torch.empty(size, dtype=torch.uint8)
        for name, (offset, nbytes, _, _) in layout.items():
            src = values[name].contiguous().reshape(-1).view(torch.uint8)
            buffer[offset : offset + nbytes].copy_(src)
        return cls._of(buffer, layout, values)

    @classmethod
    def _of(cls, buffer: Any, layout: _Layout, values: Mapping[str, Any]) -> TensorBatch:
        """The batch of ``values``' keys, in order: views into ``buffer`` for those in
        ``layout``, the values themselves for the rest."""
        out = cls()
        for name, value in values.items():
            if name in layout:
                offset, nbytes, dtype, shape = layout[name]
                value = buffer[offset : offset + nbytes].view(dtype).view(shape)
            out[name] = value
        out._buffer, out._layout = buffer, layout
        return out

    def _intact(self) -> bool:
        """Whether every packed key still holds its view into the buffer."""
        layout = getattr(self, "_layout", None)
        if layout is None:
            return False
        base = self._buffer.data_ptr()
        for name, (offset, _, dtype, shape) in layout.items():
            v = self.get(name)
            if not isinstance(v, torch.Tensor) or v.dtype != dtype or tuple(v.shape) != shape:
                return False
            if v.numel() and (v.data_ptr() != base + offset or not v.is_contiguous()):
                return False
        return True

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._intact():
            return (dict, (dict(self),))
        rest = {k: (None if k in self._layout else v) for k, v in self.items()}
        return (_unpack_batch, (self._buffer, self._layout, rest))


def _unpack_batch(buffer: Any, layout: _Layout, values: Mapping[str, Any]) -> TensorBatch:
    """A pickled :class:`TensorBatch` back: views into ``buffer`` (``values`` holds every key in
    order, None for the packed ones)."""
    return TensorBatch._of(buffer, layout, values)


class TableLoader:
    """A ``DataLoader`` over a :class:`TableDataset` that records each batch's progress as it is
    handed out (prefetched batches do not count), so ``dataset.state_dict()`` is exact."""

    def __init__(self, dataset: TableDataset, num_workers: int, kwargs: dict[str, Any]) -> None:
        if kwargs.get("batch_size") is not None or "collate_fn" in kwargs:
            raise ValidationError(
                "Cannot make a TableLoader: the dataset batches and collates itself (set "
                "TableDataset's batch_size and transform instead of batch_size/collate_fn)"
            )
        kwargs.pop("batch_size", None)
        self.dataset, self.num_workers, self.kwargs = dataset, num_workers, kwargs

    def __iter__(self) -> Iterator[Any]:
        base = self.dataset._begin()
        tagged = _Tagged(self.dataset, base)
        loader = DataLoader(
            tagged, batch_size=None, collate_fn=_identity, num_workers=self.num_workers,
            **self.kwargs,
        )  # fmt: skip
        for data, batch in loader:
            self.dataset._progress.record(batch)
            if data is not None:
                yield data

    def state_dict(self, gather: bool = True) -> dict[str, Any]:
        return self.dataset.state_dict(gather)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.dataset.load_state_dict(state)


class _Tagged(IterableDataset):
    """(collated batch, progress-only Batch) pairs for :class:`TableLoader`."""

    def __init__(self, dataset: TableDataset, base: Progress) -> None:
        self.dataset, self.base = dataset, base

    def __iter__(self) -> Iterator[tuple[Any, Batch]]:
        for batch in self.dataset._shard(self.base):
            data = self.dataset.collate(batch.data) if batch.data is not None else None
            yield data, Batch(None, batch.shard, batch.taken, batch.done)


def _identity(x: Any) -> Any:
    return x


def _copy(p: Progress) -> Progress:
    return Progress(p.epoch, set(p.done), dict(p.taken))


def _tensor(col: pa.Array) -> Any:
    """Numbers and booleans (and dense lists of numbers) as a tensor, the rest as a list."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return torch.from_numpy(column_numpy(col))
    width = uniform_list_width(col)
    if width is not None:
        return torch.from_numpy(col.flatten().to_numpy().reshape(len(col), width))
    return col.to_pylist()


def _numpy_tensor(arr: np.ndarray) -> Any:
    return arr if arr.dtype == object else torch.from_numpy(arr)


# -- end TableDataset ---------------------------------------------------------------------


# -- MmapDataset (mmap exports) ---------------------------------------------------------------


class MmapDataset(Dataset[Any]):
    """A map-style dataset over a :meth:`Table.export_mmap` directory, memory-mapped read-only
    (pages are loaded on access and dropped by the OS under memory pressure: data larger than
    memory trains without running out of it).

    ``ds[i]`` is ``(features, label)`` as tensors (float32, shapes ``(n_features,)`` and ``()``),
    or ``features`` alone when the export has no label. ``normalize=True`` returns
    ``(x - mean) / std`` with the export's statistics (std 0 or no statistics: left as is).
    ``schema`` is the export's ``schema.json``.

    Raises:
        ValidationError: ``path`` is not an mmap export.
    """

    def __init__(self, path: str | os.PathLike[str], *, normalize: bool = False) -> None:
        self.path = Path(path)
        self.schema = read_schema(self.path)
        rows = int(self.schema["rows"])
        width = len(self.schema["features"]["columns"])
        self.features = _memmap(self.path / self.schema["features"]["file"], (rows, width))
        label = self.schema["label"]
        self.labels = None if label is None else _memmap(self.path / label["file"], (rows,))
        self._shift: np.ndarray | None = None
        self._scale: np.ndarray | None = None
        if normalize:
            stats = [self.schema["normalization"][c] for c in self.schema["features"]["columns"]]
            self._shift = np.array([s["mean"] or 0.0 for s in stats], np.float32)
            self._scale = np.array([s["std"] or 1.0 for s in stats], np.float32)

    def __len__(self) -> int:
        return int(self.features.shape[0])

    def __getitem__(self, index: int | Sequence[int] | np.ndarray) -> Any:
        """One row, or a batch of rows for a sequence of indices (one gather from the map: use
        ``DataLoader(ds, sampler=BatchSampler(...), batch_size=None)``)."""
        rows = len(self)
        if isinstance(index, (int, np.integer)):
            i = int(index) + (rows if index < 0 else 0)
            if not 0 <= i < rows:
                raise IndexError(f"index {index} out of range for {rows} rows")
            where: Any = i
        else:
            where = np.asarray(index, dtype=np.int64)
            where = np.where(where < 0, where + rows, where)
            if where.size and (where.min() < 0 or where.max() >= rows):
                raise IndexError(f"indices out of range for {rows} rows")
        x = np.array(self.features[where], dtype=np.float32)  # a copy: the map stays read-only
        if self._shift is not None and self._scale is not None:
            x = (x - self._shift) / self._scale
        if self.labels is None:
            return torch.from_numpy(x)
        return torch.from_numpy(x), torch.from_numpy(np.array(self.labels[where], np.float32))


def _memmap(file: Path, shape: tuple[int, ...]) -> np.ndarray:
    if shape[0] == 0:  # numpy cannot map an empty file
        return np.zeros(shape, np.float32)
    return np.memmap(file, dtype="<f4", mode="r", shape=shape)
