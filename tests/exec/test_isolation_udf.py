"""``isolated(fn)`` called directly, as Spark calls a scalar pandas UDF (one batch per call)."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from omnitable.exceptions import ValidationError
from omnitable.isolation import (
    ERROR_FIELDS,
    IsolatedFunction,
    isolated,
    isolated_schema,
)
from omnitable.isolation.udf import KindCountsParam


def halve(x: pd.Series) -> pd.Series:
    if (x < 0).any():
        raise ValueError("negative input")
    return x / 2


def test_null_mode_returns_the_series_with_nulls_and_keeps_failures() -> None:
    safe = isolated(halve)
    assert isinstance(safe, IsolatedFunction) and safe.__name__ == "halve"
    clean = pd.Series([2.0, 4.0])
    assert safe(clean).tolist() == [1.0, 2.0]
    out = safe(pd.Series([2.0, -1.0, 6.0]))
    assert out.isna().tolist() == [False, True, False] and out[0] == 1.0 and out[2] == 3.0
    assert [(f.position, f.kind, f.exception_type) for f in safe.failures] == [
        (1, "exception", "ValueError")
    ]
    assert safe.failure_counts == {"exception": 1} and safe.batches == 2
    safe.clear_failures()
    assert safe.failures == [] and safe.failure_counts == {}


def test_error_column_mode() -> None:
    checked = isolated(halve, errors="column")
    frame = checked(pd.Series([2.0, -1.0]))
    assert list(frame.columns) == ["value", *ERROR_FIELDS]
    assert frame["value"].isna().tolist() == [False, True]
    assert frame["error_kind"].tolist() == [None, "exception"]
    assert frame["error_type"].tolist() == [None, "ValueError"]
    assert "negative input" in frame["error_message"][1]
    assert len(frame["error_digest"][1]) == 64 and frame["error_digest"][0] is None


def test_several_outputs_as_a_struct() -> None:
    def stats(x: pd.Series) -> pd.DataFrame:
        if (x < 0).any():
            raise ValueError("negative")
        return pd.DataFrame({"lo": x - 1, "hi": x + 1})

    frame = isolated(stats, output_names=["lo", "hi"])(pd.Series([1, -1, 3]))
    assert list(frame.columns) == ["lo", "hi"]
    assert frame["lo"].tolist() == [0, None, 2] and frame["hi"].tolist() == [2, None, 4]


def test_decorator_form_and_pickling_resets_the_local_log() -> None:
    @isolated(timeout_s=1.0, memory_mb=512)
    def double(x: pd.Series) -> pd.Series:
        if (x == 0).any():
            raise ZeroDivisionError("zero")
        return x * 2

    assert double(pd.Series([0, 1])).isna().tolist() == [True, False]
    assert double.failure_counts == {"exception": 1}
    copy = pickle.loads(pickle.dumps(isolated(halve, timeout_s=1.0)))
    assert copy.policy.timeout_s == 1.0 and copy.failures == []
    assert copy(pd.Series([4.0])).tolist() == [2.0]


def test_schema_helper() -> None:
    tail = ", error_kind string, error_type string, error_message string, error_digest string"
    assert isolated_schema("double") == "`value` double" + tail
    assert isolated_schema(a="bigint", b="array<string>") == "`a` bigint, `b` array<string>" + tail
    with pytest.raises(ValidationError, match="either one value type or named output types"):
        isolated_schema()


def test_counter_param_sums_by_kind() -> None:
    param = KindCountsParam()
    total = param.zero({})
    total = param.addInPlace(total, {"exception": 2})
    total = param.addInPlace(total, {"exception": 1, "crash": 1})
    assert total == {"exception": 3, "crash": 1}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"errors": "raise"}, "errors must be 'null' or 'column'"),
        ({"split": 2}, "unknown option(s) ['split']"),
        ({"errors": "column", "output_names": ["error_kind"]}, "are reserved"),
        ({"timeout_s": -1}, "timeout_s must be a positive number"),
        ({"output_names": []}, "output_names must be unique non-empty strings"),
    ],
)
def test_isolated_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=r"^Cannot ") as info:
        isolated(halve, **kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_wrapping_twice_or_a_non_callable_is_refused() -> None:
    with pytest.raises(ValidationError, match="expected a plain callable"):
        isolated(isolated(halve))
    with pytest.raises(ValidationError, match="expected a plain callable"):
        isolated(np.float64(1.0))  # type: ignore[arg-type]
