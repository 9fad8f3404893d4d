"""``Table.lookup``: point lookups by key through the global index, without a scan.

The keys are hashed, the index files of the snapshot's live fragments are probed (a directory of
hash prefixes, then a binary search in a bucket, over cached arrays), and only the data pages
holding the hits are read, per fragment. Rows come back in the order of the given keys; keys no
live row holds are left out. The key columns are not read back: a key found by its 128-bit hash
is the key asked for, as upserts assume too (``verify_keys`` reads them and compares; keys of
several integer or date columns, hashed to 64 bits, are always compared).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.dataops.keyed import locate, read_found, require_key, same_keys
from omnitable.exceptions import ValidationError
from omnitable.format.reader import FragmentReader
from omnitable.ingest.sources import is_pandas_dataframe
from omnitable.vocabulary.keys import key_hashes, weak_key_hash
from omnitable.vocabulary.types import ARROW_VALUE_ERRORS


def lookup_rows(
    ctx: TableContext,
    keys: Any,
    columns: list[str] | None,
    snapshot: dict[str, Any],
    verify_keys: bool = False,
) -> pa.Table:
    """The live rows holding ``keys`` (see ``Table.lookup``). The key columns returned are the
    keys asked for, which the index matched by their 128-bit hash, unless ``verify_keys`` or
    the key's hash is weaker (:func:`weak_key_hash`): then they are read back from the rows, and
    a row whose stored key differs (a hash collision) is left out.

    Raises:
        ValidationError: not a keyed table, malformed or NULL keys, keys that do not convert to
            the key columns' types. UnknownColumnError: unknown ``columns``.
    """
    key = require_key(ctx, "look up rows of")
    names = None if columns is None else list(columns)
    wanted = None if names is None else [*key, *(n for n in names if n not in key)]
    snap = ctx.snapshot(**snapshot, scope=SnapshotScope.of(None, wanted), reuse=True)
    out_cols = snap.column_names() if names is None else names
    if isinstance(names, list):
        for n in names:
            snap.column(n)  # UnknownColumnError
    schema = pa.schema([snap.arrow_schema().field(c) for c in out_cols])
    given = _key_table(ctx, snap, key, keys)
    h1, h2 = key_hashes([given.column(k) for k in key])
    fragments, where, offsets = locate(ctx, snap, h1, h2)
    found = np.flatnonzero(where >= 0)  # the keys some live row holds, in the order given
    if not len(found):
        return schema.empty_table()
    verify = verify_keys or weak_key_hash([snap.column(k).arrow_type for k in key])
    read_cols = [c for c in out_cols if c not in key] + (key if verify else [])
    asked = given.take(pa.array(found))
    out = {k: asked.column(k) for k in key}
    if read_cols:  # none when only key columns are asked for, and trusted
        reader = FragmentReader(ctx.location, snap)
        values = read_found(reader, fragments, where, offsets, read_cols)
        out.update({c: values.column(c) for c in read_cols})
    # no column asked (columns=[]): one row per key found all the same
    rows = asked.select([]) if not out_cols else pa.Table.from_arrays(
        [out[c] for c in out_cols], schema=schema
    )  # fmt: skip
    return rows.filter(same_keys(values, asked, key)) if verify else rows


def _key_table(ctx: TableContext, snap: Snapshot, key: list[str], keys: Any) -> pa.Table:
    """The given keys as a table of the key columns, with their types."""
    if isinstance(keys, pa.Table) or is_pandas_dataframe(keys):
        table = (
            keys if isinstance(keys, pa.Table) else pa.Table.from_pandas(keys, preserve_index=False)
        )
        missing = [k for k in key if k not in table.column_names]
        if missing:
            raise ValidationError(f"Cannot look up rows of table '{ctx.name}': keys lack column(s) {missing}")  # fmt: skip
        arrays = [table.column(k) for k in key]
    elif isinstance(keys, (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)):
        values = (
            list(keys) if not isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys.to_pylist()
        )
        if len(key) == 1:
            arrays = [pa.array(values)] if values else [pa.nulls(0)]
        else:
            if any(not isinstance(v, (tuple, list)) or len(v) != len(key) for v in values):
                raise ValidationError(
                    f"Cannot look up rows of table '{ctx.name}': its key is {key}; give each "
                    f"key as a tuple of {len(key)} values"
                )
            arrays = [pa.array([v[i] for v in values]) for i in range(len(key))]
    else:
        raise ValidationError(
            f"Cannot look up rows of table '{ctx.name}': keys must be a list of key values, a "
            f"pyarrow Table or a pandas DataFrame, got {type(keys).__name__}"
        )
    out = {}
    for k, arr in zip(key, arrays, strict=True):
        target = snap.column(k).arrow_type
        try:
            out[k] = (
                arr.cast(target) if not pa.types.is_null(arr.type) else pa.nulls(len(arr), target)
            )
        except ARROW_VALUE_ERRORS as exc:
            raise ValidationError(
                f"Cannot look up rows of table '{ctx.name}': key column '{k}' is {target}, the "
                f"given keys ({arr.type}) do not convert: {exc}"
            ) from exc
        if out[k].null_count:
            raise ValidationError(f"Cannot look up rows of table '{ctx.name}': a key holds NULL")
    return pa.table(out)
