"""The catalog's small SQL helpers: IN lists and pausing the garbage collector during fetches."""

from __future__ import annotations

import gc

import pytest

from omnitable.catalog.sql import gc_paused, in_list


def test_in_list_binds_every_value_and_an_empty_list_matches_nothing() -> None:
    params: dict[str, object] = {}
    assert in_list("c.x", "p", [3, 4], params) == "c.x IN (:p0, :p1)"
    assert params == {"p0": 3, "p1": 4}
    assert in_list("c.x", "q", [], params) == "1 = 0"


def test_gc_paused_restores_the_collector_even_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_gc_paused_leaves_a_collector_the_caller_disabled_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            with gc_paused():  # nested: the inner exit does not re-enable it
                pass
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
