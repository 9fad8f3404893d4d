"""User keys of keyed tables (``create_table(key=[...])``): which columns form the key, which
types may, and the 128-bit key hash the global index is sorted by (docs/dataops.md, upserts).

The hash is part of the on-storage format (index files record :data:`HASH_SCHEME`): strings are
hashed with SipHash-2-4 of their UTF-8 bytes under two fixed 16-byte keys (pandas'
``hash_array``), giving two independent 64-bit halves; integers are mixed by a bijection of their
int64 value (so integer keys never collide); a key of several columns folds the per-column
halves in key order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.exceptions import ValidationError

KEY_PROPERTY = "table.key"
"""The table property holding a keyed table's key columns (a list of names, set at creation)."""

HASH_SCHEME = "omnitable-key-hash-1"
_SIP_KEYS = ("omnitable-key-h1", "omnitable-key-h2")
_FOLD = np.uint64(0x100000001B3)


def key_type_ok(t: pa.DataType) -> bool:
    """Whether a column of this Arrow type may be (part of) a key."""
    return bool(
        pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
        or pa.types.is_date(t)
    )  # fmt: skip


def table_key(properties: dict[str, Any]) -> list[str] | None:
    """The key columns a table declares (None: not a keyed table)."""
    key = properties.get(KEY_PROPERTY)
    return None if key is None else [str(k) for k in key]


def check_key(key: object, columns: dict[str, pa.DataType], what: str) -> list[str]:
    """Validate a declared key against the table's columns; returns it as a list of names."""
    names = [key] if isinstance(key, str) else key
    if not isinstance(names, (list, tuple)) or not names:
        raise ValidationError(f"Cannot {what}: key must be a column name or a non-empty list")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in columns:
            raise ValidationError(
                f"Cannot {what}: key column {name!r} is not a column of the schema "
                f"({', '.join(columns)})"
            )
        if not key_type_ok(columns[name]):
            raise ValidationError(
                f"Cannot {what}: key column '{name}' has type {columns[name]}; keys are "
                "strings, integers or dates"
            )
        if name in out:
            raise ValidationError(f"Cannot {what}: key column '{name}' is listed twice")
        out.append(name)
    return out


def weak_key_hash(types: Sequence[pa.DataType]) -> bool:
    """Whether distinct keys of these column types (in key order) can collide at 64 bits, not
    128: a key of several columns, none of them a string, hashes each column to one 64-bit
    value put in both halves, so its two halves stay equal (a key of one integer or date column
    is hashed by a bijection and never collides)."""
    return len(types) > 1 and not any(pa.types.is_string(t) or pa.types.is_large_string(t)
                                      for t in types)  # fmt: skip


def key_hashes(columns: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, np.ndarray]:
    """The two uint64 halves of the hash of each row's key (columns in key order, no nulls)."""
    h1 = h2 = None
    for col in columns:
        a, b = _column_hashes(col)
        if h1 is None or h2 is None:
            h1, h2 = a, b
        else:
            h1 = _mix((h1 * _FOLD) ^ a)
            h2 = _mix((h2 * _FOLD) ^ b)
    if h1 is None or h2 is None:
        raise ValidationError("A key has at least one column")
    return h1, h2


def _column_hashes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    from pandas.util import hash_array

    t = col.type
    if pa.types.is_integer(t) or pa.types.is_date(t):
        if pa.types.is_date64(t):
            col = col.cast(pa.date32())
        if pa.types.is_date(col.type):
            col = col.cast(pa.int32())
        values = np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False))
        h = hash_array(values.astype(np.int64))
        return h, h
    values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
    return (
        hash_array(values, hash_key=_SIP_KEYS[0], categorize=False),
        hash_array(values, hash_key=_SIP_KEYS[1], categorize=False),
    )


def _mix(h: np.ndarray) -> np.ndarray:
    from pandas.util import hash_array

    return np.asarray(hash_array(h.astype(np.uint64)))
