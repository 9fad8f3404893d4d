"""The training data plane: what feeds training jobs without a JVM or Spark.

Pinned-snapshot readers for PyTorch loaders, streaming exports (mmap, Delta, Iceberg),
statistics and fitted preprocessing (docs/training.md). Built on the Python zip reader; the
public entry points are ``omnitable.torch``, ``omnitable.preprocess`` and ``Table`` methods.
"""
