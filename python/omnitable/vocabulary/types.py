"""Logical types: Spark SQL DDL strings in the catalog, canonical Arrow types in files.

The catalog stores every column's type as a Spark DDL string (``bigint``, ``array<double>``,
``struct<a:int,b:string>``, ``decimal(10,2)``); the JVM parses it with Spark's own parser, Python
with :func:`parse_ddl`. :func:`to_ddl` and :func:`to_arrow` are inverse on canonical types, and
:func:`canonical_arrow_type` maps any supported Arrow input type onto the canonical set
(see docs/format.md, "Parquet types").
"""

from __future__ import annotations

import functools
import re

import pyarrow as pa

from omnitable.exceptions import ValidationError

ARROW_VALUE_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
"""What Arrow raises for a cast, a conversion or an expression it cannot apply to the data;
callers turn it into a specific OmniTable error."""

_PRIMITIVE_TO_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_ALIASES = {
    "integer": "int",
    "long": "bigint",
    "short": "smallint",
    "byte": "tinyint",
    "bool": "boolean",
    "real": "float",
    "str": "string",
    "text": "string",
}
_ARROW_TO_PRIMITIVE = {str(t): name for name, t in _PRIMITIVE_TO_ARROW.items()}
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def canonical_arrow_type(t: pa.DataType, column: str = "?") -> pa.DataType:
    """Map an Arrow type onto the canonical type stored in column files.

    Raises:
        ValidationError: for types with no lossless canonical form (uint64, null, unions, …).
    """
    if pa.types.is_dictionary(t):
        return canonical_arrow_type(t.value_type, column)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return pa.binary()
    if pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_uint64(t):
        raise ValidationError(
            f"Cannot store column '{column}': uint64 has no lossless Spark type; "
            "cast it to int64 (or declare the column as decimal(20,0)) first"
        )
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC") if t.tz is not None else pa.timestamp("us")
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise ValidationError(
                f"Cannot store column '{column}': decimal precision {t.precision} exceeds 38"
            )
        return pa.decimal128(t.precision, t.scale)
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or (
            hasattr(pa.types, "is_list_view")
            and (pa.types.is_list_view(t) or pa.types.is_large_list_view(t))
        )
    ):
        return pa.list_(canonical_arrow_type(t.value_type, column))
    if pa.types.is_map(t):
        return pa.map_(
            canonical_arrow_type(t.key_type, column), canonical_arrow_type(t.item_type, column)
        )
    if pa.types.is_struct(t):
        return pa.struct(
            [pa.field(f.name, canonical_arrow_type(f.type, f"{column}.{f.name}")) for f in t]
        )
    if str(t) in _ARROW_TO_PRIMITIVE:
        return t
    if pa.types.is_null(t):
        raise ValidationError(
            f"Cannot infer the type of column '{column}': every value is null; "
            "declare its type in create_table() or cast the input"
        )
    raise ValidationError(f"Cannot store column '{column}': unsupported Arrow type {t}")


def to_ddl(t: pa.DataType) -> str:
    """Spark DDL string of a canonical Arrow type (call canonical_arrow_type first)."""
    name = _ARROW_TO_PRIMITIVE.get(str(t))
    if name is not None:
        return name
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return f"array<{to_ddl(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{to_ddl(t.key_type)},{to_ddl(t.item_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{_quote(f.name)}:{to_ddl(f.type)}" for f in t) + ">"
    raise ValidationError(f"Cannot describe type {t}: not a canonical OmniTable type")


def _quote(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else "`" + name.replace("`", "``") + "`"


@functools.lru_cache(maxsize=4096)
def to_arrow(ddl: str) -> pa.DataType:
    """Arrow type of a Spark DDL type string (cached: a wide table repeats a few types)."""
    parser = _DdlParser(ddl)
    t = parser.parse_type()
    parser.expect_end()
    return t


def parse_type_spec(spec: str | pa.DataType, column: str) -> pa.DataType:
    """Canonical Arrow type from a user's type spec: an Arrow type or a Spark DDL string."""
    if isinstance(spec, pa.DataType):
        return canonical_arrow_type(spec, column)
    if isinstance(spec, str):
        try:
            return to_arrow(spec)
        except ValidationError as exc:
            raise ValidationError(f"Cannot use type '{spec}' for column '{column}': {exc}") from exc
    raise ValidationError(
        f"Cannot use type {spec!r} for column '{column}': give a pyarrow type or a Spark DDL "
        "string such as 'bigint', 'string', 'array<float>'"
    )


class _DdlParser:
    _TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = self._TOKEN.match(text, pos)
            if not m:
                raise ValidationError(f"unexpected character {text[pos]!r} at {pos} in '{text}'")
            self.tokens.append(m.group(1))
            pos = m.end()
        self.i = 0

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _next(self) -> str:
        tok = self._peek()
        if tok is None:
            raise ValidationError(f"unexpected end of type '{self.text}'")
        self.i += 1
        return tok

    def _expect(self, tok: str) -> None:
        got = self._next()
        if got != tok:
            raise ValidationError(f"expected '{tok}' but found '{got}' in type '{self.text}'")

    def expect_end(self) -> None:
        if self._peek() is not None:
            raise ValidationError(f"unexpected '{self._peek()}' in type '{self.text}'")

    def parse_type(self) -> pa.DataType:
        word = self._next().lower()
        word = _ALIASES.get(word, word)
        if word in _PRIMITIVE_TO_ARROW:
            return _PRIMITIVE_TO_ARROW[word]
        if word in ("decimal", "numeric", "dec"):
            if self._peek() != "(":
                return pa.decimal128(10, 0)
            self._expect("(")
            precision = int(self._next())
            scale = 0
            if self._peek() == ",":
                self._next()
                scale = int(self._next())
            self._expect(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise ValidationError(f"invalid decimal({precision},{scale}) in '{self.text}'")
            return pa.decimal128(precision, scale)
        if word == "array":
            self._expect("<")
            item = self.parse_type()
            self._expect(">")
            return pa.list_(item)
        if word == "map":
            self._expect("<")
            key = self.parse_type()
            self._expect(",")
            value = self.parse_type()
            self._expect(">")
            return pa.map_(key, value)
        if word == "struct":
            self._expect("<")
            fields: list[pa.Field] = []
            while self._peek() != ">":
                name = self._next()
                if name.startswith("`"):
                    name = name[1:-1].replace("``", "`")
                self._expect(":")
                fields.append(pa.field(name, self.parse_type()))
                if self._peek() == ",":
                    self._next()
            self._expect(">")
            return pa.struct(fields)
        raise ValidationError(f"unknown type '{word}' in '{self.text}'")
