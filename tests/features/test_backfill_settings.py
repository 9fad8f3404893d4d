"""A backfill's ``max_error_ratio`` follows the settings chain (docs/settings.md): argument >
warehouse setting > table property > default."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import omnitable

from . import omt_faulty_features as faulty

pytestmark = pytest.mark.spark


def test_max_error_ratio_comes_from_the_argument_the_warehouse_or_the_table(
    wh: omnitable.Warehouse, spark: SparkSession
) -> None:
    texts = [f"RAISE {i}" if i % 50 == 0 else f"record {i}" for i in range(200)]  # 2 % fail
    props = {"backfill.max_error_ratio": 0.015}
    t = wh.create_table("docs", {"text": "string"}, properties=props)
    t.append(pa.table({"text": texts}), "b1")
    t.register(faulty.score)
    with pytest.raises(omnitable.ErrorRatioExceeded, match=r"above max_error_ratio=1\.50%"):
        t.backfill("score").run(spark)  # the table property, not the default 1 %
    with omnitable.connect(wh.uri, settings={"backfill.max_error_ratio": 0.5}) as wh2:
        t2 = wh2.table("docs")
        with pytest.raises(omnitable.ErrorRatioExceeded, match=r"above max_error_ratio=1\.00%"):
            t2.backfill("score").run(spark, max_error_ratio=0.01)  # the argument
        result = t2.backfill("score").run(spark)  # the warehouse setting: 2 % <= 50 %
    assert result.errors == {"score@1": 4}
    assert t.status().state("b1", "score") == "done"
