"""``isolated(fn)`` as the body of plain PySpark pandas UDFs, through a real local Spark."""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Iterator

import pandas as pd
import pytest

from omnitable.isolation import failure_counter, isolated, isolated_schema

pytestmark = pytest.mark.spark


def score(x: pd.Series) -> pd.Series:
    if (x == 13).any():
        raise ValueError("unlucky record in this batch")
    return x * 0.5


def crashy(x: pd.Series) -> pd.Series:
    if (x == 7).any():
        ctypes.string_at(0)  # segfault
    return x * 0.5


def on_main_thread(x: pd.Series) -> pd.Series:
    return pd.Series([float(threading.current_thread() is threading.main_thread())] * len(x))


@pytest.fixture(scope="module", autouse=True)
def _ship_this_module_by_value() -> Iterator[None]:
    """Spark's Python workers cannot import test modules; pickle their functions by value."""
    from pyspark import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


def _frame(spark):  # type: ignore[no-untyped-def]
    return spark.range(0, 200, numPartitions=2).selectExpr("CAST(id AS DOUBLE) AS x")


def test_wrapped_udf_completes_and_unwrapped_fails(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import pandas_udf

    df = _frame(spark)
    safe = pandas_udf(isolated(score), "double")
    got = {r.x: r.y for r in df.select("x", safe("x").alias("y")).collect()}
    assert len(got) == 200 and got[13.0] is None
    assert all(y == x * 0.5 for x, y in got.items() if x != 13.0)

    with pytest.raises(Exception, match="unlucky record"):
        df.select(pandas_udf(score, "double")("x")).collect()


def test_error_column_and_counter(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import pandas_udf

    counter = failure_counter(spark)
    checked = pandas_udf(
        isolated(score, errors="column", counter=counter), isolated_schema("double")
    )
    rows = (
        _frame(spark)
        .select("x", checked("x").alias("r"))
        .select("x", "r.value", "r.error_kind", "r.error_type", "r.error_message")
        .collect()
    )
    bad = [r for r in rows if r.error_kind is not None]
    assert [(r.x, r.value, r.error_kind, r.error_type) for r in bad] == [
        (13.0, None, "exception", "ValueError")
    ]
    assert "unlucky" in bad[0].error_message
    assert counter.value == {"exception": 1}


def test_segfault_contained_in_subprocess_mode(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import pandas_udf

    counter = failure_counter(spark)
    safe = pandas_udf(isolated(crashy, mode="subprocess", counter=counter), "double")
    got = {r.x: r.y for r in _frame(spark).select("x", safe("x").alias("y")).collect()}
    assert got[7.0] is None and got[8.0] == 4.0 and len(got) == 200
    assert counter.value == {"crash": 1}


def test_pandas_udfs_run_on_the_workers_main_thread(spark) -> None:  # type: ignore[no-untyped-def]
    """The in-process alarm (SIGALRM) needs the main thread; Spark runs pandas UDFs there."""
    from pyspark.sql.functions import pandas_udf

    flags = _frame(spark).select(pandas_udf(on_main_thread, "double")("x").alias("m")).collect()
    assert {r.m for r in flags} == {1.0}
