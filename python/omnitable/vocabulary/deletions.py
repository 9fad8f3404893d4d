"""Deletion vectors: which rows of one fragment are deleted, by offset (docs/dataops.md).

The catalog stores a vector as text (``deletion_vectors.vector``, docs/catalog.md): the base64
of the zlib compression of a little-endian bitmap of the fragment's ``row_count`` bits, where
bit ``i % 8`` of byte ``i // 8`` set means row offset ``i`` is deleted. The JVM reader decodes
the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import zlib

import numpy as np

from omnitable.exceptions import CorruptInputError


def encode_vector(deleted: np.ndarray) -> str:
    """The stored text of a boolean mask (True: deleted), one entry per row of the fragment."""
    bits = np.packbits(np.asarray(deleted, dtype=bool), bitorder="little")
    return base64.b64encode(zlib.compress(bits.tobytes(), 6)).decode("ascii")


def decode_vector(text: str, row_count: int, *, where: str = "a deletion vector") -> np.ndarray:
    """The boolean mask (True: deleted) of ``row_count`` rows stored as ``text``.

    Raises:
        CorruptInputError: ``text`` is not a vector of ``row_count`` rows (``where`` names it).
    """
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, zlib.error, UnicodeEncodeError, ValueError) as exc:
        raise CorruptInputError(f"Cannot decode {where}: {exc}") from exc
    if len(raw) != (row_count + 7) // 8:
        raise CorruptInputError(
            f"Cannot decode {where}: it holds {len(raw)} bytes, a fragment of {row_count} rows "
            f"needs {(row_count + 7) // 8}"
        )
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
    if bits[row_count:].any():
        raise CorruptInputError(f"Cannot decode {where}: bits set past row {row_count}")
    return bits[:row_count].astype(bool)
