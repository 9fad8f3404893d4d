"""Fixtures of the Spark tests (besides tests/conftest.py's shared session and warehouses)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spark_tables import bind_catalog, reset_write_settings

import omnitable


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Iterator[str]:
    """A Spark catalog name bound to this test's warehouse; session write settings reset after.
    (Modules with a catalog fixture of their own use theirs.)"""
    yield bind_catalog(spark, wh)
    reset_write_settings(spark)
