"""Mergeable sketches for column statistics, vectorized with numpy (docs/training.md
"Statistics").

* :class:`Moments`: count, mean and sum of squared deviations, merged exactly (Chan et al.).
* :class:`QuantileSketch`: a t-digest with a uniform scale function — sorted centroids of at most
  ``size`` values each of equal weight; exact (numpy's linear interpolation) while the column
  has at most ``size`` values, else a rank error of about ``1 / size`` per merge level.
* :class:`DistinctSketch`: exact up to 50,000 distinct values (a set of 64-bit hashes), then
  HyperLogLog with 2**14 registers (standard error about 0.8 %).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_HLL_BITS = 14
_HLL_M = 1 << _HLL_BITS


class Moments:
    """Count, mean and M2 (sum of squared deviations) of float64 values, merged exactly."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, values: np.ndarray) -> None:
        n = len(values)
        if n == 0:
            return
        mean = float(values.mean())
        m2 = float(((values - mean) ** 2).sum())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total

    def std(self, ddof: int = 1) -> float | None:
        """Standard deviation (``ddof=1``: the sample one, as pandas); None without values."""
        if self.count - ddof <= 0:
            return None
        return float(np.sqrt(self.m2 / (self.count - ddof)))


class QuantileSketch:
    """Sorted centroids (mean, weight); merges recompress to at most ``size`` centroids."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._means: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []
        self._pending = 0

    def add(self, values: np.ndarray) -> None:
        if len(values) == 0:
            return
        means, weights = _compress(np.sort(values), np.ones(len(values)), self.size)
        self._means.append(means)
        self._weights.append(weights)
        self._pending += len(means)
        if self._pending > 4 * self.size:
            self._merge()

    def _merge(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._means:
            return np.empty(0), np.empty(0)
        means = np.concatenate(self._means)
        weights = np.concatenate(self._weights)
        order = np.argsort(means, kind="stable")
        means, weights = _compress(means[order], weights[order], self.size)
        self._means, self._weights, self._pending = [means], [weights], len(means)
        return means, weights

    def quantiles(self, qs: list[float]) -> list[float | None]:
        """The quantiles ``qs`` (numpy's linear interpolation when exact); None without values."""
        means, weights = self._merge()
        if len(means) == 0:
            return [None] * len(qs)
        total = weights.sum()
        # a centroid of weight w holding ranks [c, c + w) sits at rank c + (w - 1) / 2
        positions = np.cumsum(weights) - weights + (weights - 1) / 2
        targets = np.asarray(qs, dtype=np.float64) * (total - 1)
        return [float(v) for v in np.interp(targets, positions, means)]


def _compress(means: np.ndarray, weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted centroids merged into at most ``size`` of about equal weight."""
    if len(means) <= size:
        return means, weights
    cum = np.cumsum(weights)
    total = cum[-1]
    bins = np.minimum(((cum - weights / 2) / total * size).astype(np.int64), size - 1)
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    w = np.add.reduceat(weights, starts)
    m = np.add.reduceat(means * weights, starts) / w
    return m, w


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: 64-bit keys to well-spread 64-bit hashes."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def hash_values(values: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """64-bit hashes of the non-null values, repeats possibly dropped (equal values, equal
    hashes); None for types not hashed (lists, structs, maps)."""
    t = values.type
    values = pc.drop_null(values)
    if pa.types.is_floating(t):
        f = values.cast(pa.float64()).to_numpy(zero_copy_only=False) + 0.0  # -0.0 is 0.0
        return _mix(f.view(np.uint64))
    if pa.types.is_integer(t) or pa.types.is_temporal(t) or pa.types.is_boolean(t):
        if pa.types.is_temporal(t):
            values = values.cast(pa.int64()) if t.bit_width == 64 else values.cast(pa.int32())
        ints = values.cast(pa.int64()).to_numpy(zero_copy_only=False)
        return _mix(ints.view(np.uint64))
    if (
        pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
        or pa.types.is_large_binary(t) or pa.types.is_decimal(t)
    ):  # fmt: skip
        # repeats hash alike: hash each distinct value once (Arrow's hash table is far faster
        # than hashing Python objects)
        objects = pc.unique(values).to_numpy(zero_copy_only=False)
        return np.asarray(pd.util.hash_array(objects, categorize=False), dtype=np.uint64)
    return None


class DistinctSketch:
    """Distinct 64-bit hashes counted exactly up to ``SMALL`` of them (a sorted set), then by
    HyperLogLog (the set folded into the registers)."""

    SMALL = 50_000

    def __init__(self) -> None:
        self.registers = np.zeros(_HLL_M, dtype=np.uint8)
        self._small: np.ndarray | None = np.empty(0, dtype=np.uint64)

    def add(self, hashes: np.ndarray) -> None:
        if len(hashes) == 0:
            return
        if self._small is not None:
            self._small = np.union1d(self._small, hashes)
            if len(self._small) <= self.SMALL:
                return
            hashes, self._small = self._small, None
        index = (hashes >> np.uint64(64 - _HLL_BITS)).astype(np.int64)
        rest = (hashes << np.uint64(_HLL_BITS)) | np.uint64(1 << (_HLL_BITS - 1))
        # rank: leading zeros of the remaining bits + 1 (the sentinel bit bounds it)
        lz = 63 - np.floor(np.log2(rest.astype(np.float64))).astype(np.int64)
        rank = np.minimum(lz, 64 - _HLL_BITS) + 1
        np.maximum.at(self.registers, index, rank.astype(np.uint8))

    def estimate(self) -> int:
        if self._small is not None:
            return len(self._small)
        m = float(_HLL_M)
        alpha = 0.7213 / (1 + 1.079 / m)
        raw = alpha * m * m / float(np.sum(np.power(2.0, -self.registers.astype(np.float64))))
        zeros = int(np.count_nonzero(self.registers == 0))
        if raw <= 2.5 * m and zeros > 0:
            return round(m * np.log(m / zeros))
        return round(raw)
