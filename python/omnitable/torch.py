"""PyTorch datasets over OmniTable data (docs/training.md); torch is imported here only."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from omnitable.training.mmap import read_schema

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
