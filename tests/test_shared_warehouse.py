"""The ``shared_warehouse`` marker of tests/conftest.py: a marked test's ``catalog_spec`` and ``wh``
are its module's (one per backend, open for the module); an unmarked test's are its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import omnitable


@pytest.mark.shared_warehouse
def test_a_marked_test_gets_the_modules_warehouse_of_its_backend(
    request: pytest.FixtureRequest,
    catalog_spec: tuple[str, str | None],
    wh: omnitable.Warehouse,
    shared_warehouses: Any,
) -> None:
    backend = request.node.callspec.params["catalog_spec"]
    assert shared_warehouses.specs[backend] == catalog_spec
    assert shared_warehouses.warehouse(catalog_spec) is wh


def test_an_unmarked_test_gets_a_warehouse_of_its_own(
    catalog_spec: tuple[str, str | None],
    wh: omnitable.Warehouse,
    shared_warehouses: Any,
    tmp_path: Path,
) -> None:
    assert catalog_spec not in shared_warehouses.specs.values()
    assert wh not in shared_warehouses.open.values()
    uri, root = catalog_spec
    assert (root or uri).startswith(str(tmp_path))
