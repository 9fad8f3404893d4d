"""A minimal, generic Thrift compact-protocol codec (what Parquet footers and page headers use).

A struct decodes into a :class:`Struct`: its fields in wire order, each ``(field id, type,
value)``, without a schema. Encoding a decoded struct gives back the same bytes (the decoder
keeps what the wire leaves open: a list's element type byte, a boolean list element's byte), so
a caller can edit a few fields of a footer and write the rest through untouched.

Values by type: booleans ``bool``; i8/i16/i32/i64 ``int``; double ``float``; binary ``bytes``;
list and set :class:`ThriftList`; map :class:`ThriftMap`; struct :class:`Struct`.
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from typing import Any

from omnitable.exceptions import CorruptInputError

TRUE, FALSE, I8, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)
_MAX_DEPTH = 64


@dataclass
class ThriftList:
    """A list (or set): the element type byte as written, and the values."""

    elem_type: int
    items: list[Any]


@dataclass
class ThriftMap:
    """A map: the key and value types as written, and the pairs in wire order."""

    key_type: int
    value_type: int
    items: list[tuple[Any, Any]]


@dataclass
class Struct:
    """A struct's fields in wire order: ``[field id, type, value]`` (mutable, for editing)."""

    fields: list[list[Any]] = field(default_factory=list)

    def get(self, fid: int, default: Any = None) -> Any:
        for f in self.fields:
            if f[0] == fid:
                return f[2]
        return default

    def set(self, fid: int, ttype: int, value: Any) -> None:
        """Replace field ``fid`` (or insert it in field-id order)."""
        if ttype in (TRUE, FALSE):
            ttype = TRUE if value else FALSE
        for f in self.fields:
            if f[0] == fid:
                f[1], f[2] = ttype, value
                return
        at = next((i for i, f in enumerate(self.fields) if f[0] > fid), len(self.fields))
        self.fields.insert(at, [fid, ttype, value])

    def drop(self, *fids: int) -> None:
        self.fields = [f for f in self.fields if f[0] not in fids]


# -- decoding ---------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | memoryview, pos: int) -> None:
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return int(b)

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if b < 0x80:
                return out
            shift += 7
            if shift > 70:
                raise ValueError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("binary runs past the end")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def value(self, ttype: int, depth: int) -> Any:
        if ttype in (I16, I32, I64):
            return self.zigzag()
        if ttype == BINARY:
            return self.take(self.varint())
        if ttype == STRUCT:
            return self.struct(depth + 1)
        if ttype == I8:
            b = self.byte()
            return b - 256 if b > 127 else b
        if ttype == DOUBLE:
            return float(_struct.unpack("<d", self.take(8))[0])
        if ttype in (LIST, SET):
            head = self.byte()
            size = head >> 4
            if size == 15:
                size = self.varint()
            elem = head & 0x0F
            if elem in (TRUE, FALSE):  # each boolean element is one byte, kept as written
                return ThriftList(elem, [self.byte() for _ in range(size)])
            return ThriftList(elem, [self.value(elem, depth + 1) for _ in range(size)])
        if ttype == MAP:
            size = self.varint()
            kv = self.byte() if size else 0
            k, v = kv >> 4, kv & 0x0F
            return ThriftMap(
                k, v, [(self.value(k, depth + 1), self.value(v, depth + 1)) for _ in range(size)]
            )
        raise ValueError(f"unknown compact type {ttype}")

    def struct(self, depth: int = 0) -> Struct:
        if depth > _MAX_DEPTH:
            raise ValueError("structs nested too deep")
        out = Struct()
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            ttype, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            if ttype in (TRUE, FALSE):
                out.fields.append([fid, ttype, ttype == TRUE])
            else:
                out.fields.append([fid, ttype, self.value(ttype, depth)])
            last = fid


def decode_struct(data: bytes | memoryview, pos: int = 0) -> tuple[Struct, int]:
    """The struct encoded at ``data[pos:]`` and the position after it.

    Raises:
        CorruptInputError: the bytes are not a compact-protocol struct.
    """
    reader = _Reader(data, pos)
    try:
        return reader.struct(), reader.pos
    except (IndexError, ValueError, _struct.error) as exc:
        raise CorruptInputError(f"Cannot decode a Thrift struct at byte {pos}: {exc}") from exc


# -- encoding ---------------------------------------------------------------------------------


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, n: int) -> None:
    _varint(out, (n << 1) ^ (n >> 63) if n < 0 else n << 1)


def _value(out: bytearray, ttype: int, v: Any) -> None:
    if ttype in (I16, I32, I64):
        _zigzag(out, v)
    elif ttype == BINARY:
        _varint(out, len(v))
        out += v
    elif ttype == STRUCT:
        _struct_into(out, v)
    elif ttype == I8:
        out.append(v & 0xFF)
    elif ttype == DOUBLE:
        out += _struct.pack("<d", v)
    elif ttype in (LIST, SET):
        size = len(v.items)
        if size < 15:
            out.append((size << 4) | v.elem_type)
        else:
            out.append(0xF0 | v.elem_type)
            _varint(out, size)
        for item in v.items:
            if v.elem_type in (TRUE, FALSE):
                out.append(item if isinstance(item, int) and not isinstance(item, bool) else (
                    TRUE if item else FALSE))  # fmt: skip
            else:
                _value(out, v.elem_type, item)
    elif ttype == MAP:
        _varint(out, len(v.items))
        if v.items:
            out.append((v.key_type << 4) | v.value_type)
        for k, val in v.items:
            _value(out, v.key_type, k)
            _value(out, v.value_type, val)
    else:
        raise ValueError(f"unknown compact type {ttype}")


def _struct_into(out: bytearray, s: Struct) -> None:
    last = 0
    for fid, ttype, v in s.fields:
        if ttype in (TRUE, FALSE):
            ttype = TRUE if v else FALSE
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ttype)
        else:
            out.append(ttype)
            _zigzag(out, fid)
        if ttype not in (TRUE, FALSE):
            _value(out, ttype, v)
        last = fid
    out.append(0)


def encode_struct(s: Struct) -> bytes:
    """The compact-protocol bytes of ``s``."""
    out = bytearray()
    _struct_into(out, s)
    return bytes(out)
