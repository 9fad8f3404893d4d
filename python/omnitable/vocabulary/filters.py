"""A small SQL-like filter language for the command line, parsed into a pyarrow expression.

Grammar (keywords case-insensitive)::

    expr       := term (OR term)*
    term       := factor (AND factor)*
    factor     := NOT factor | '(' expr ')' | predicate
    predicate  := column op literal | column [NOT] IN '(' literal (',' literal)* ')'
                | column IS [NOT] NULL
    op         := '=' | '==' | '!=' | '<>' | '<' | '<=' | '>' | '>='
    column     := identifier | `back-quoted name`
    literal    := integer | decimal | 'single-quoted string' ('' escapes a quote) | TRUE | FALSE

Example: ``label = 'spam' AND (score < 0.2 OR lang IN ('xx', 'yy'))``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from omnitable.exceptions import ValidationError

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<str>'(?:[^']|'')*')"
    r"|(?P<quoted>`[^`]+`)|(?P<word>[A-Za-z_][A-Za-z0-9_.]*)"
    r"|(?P<op><=|>=|==|!=|<>|[=<>(),]))"
)
_COMPARE = {
    "=": pc.equal,
    "==": pc.equal,
    "!=": pc.not_equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # num | str | name | kw | op | end
    text: str
    value: object = None


def parse_filter(text: str) -> pc.Expression:
    """The pyarrow expression of ``text`` (see the module doc).

    Raises:
        ValidationError: ``text`` is not in the grammar (the message shows where).
    """
    parser = _Parser(text, _tokens(text))
    expr = parser.expr()
    parser.expect("end")
    return expr


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValidationError(
                f"Cannot parse filter {text!r}: unexpected {text[pos:].strip()[:20]!r} at "
                f"character {pos}; see `omnitable delete --help` for the syntax"
            )
        pos = m.end()
        out.append(_token(m))
    out.append(_Tok("end", "end of filter"))
    return out


def _token(m: re.Match[str]) -> _Tok:
    if m["num"] is not None:
        num = m["num"]
        return _Tok("num", num, float(num) if any(c in num for c in ".eE") else int(num))
    if m["str"] is not None:
        return _Tok("str", m["str"], m["str"][1:-1].replace("''", "'"))
    if m["quoted"] is not None:
        return _Tok("name", m["quoted"], m["quoted"][1:-1])
    if m["word"] is not None:
        word = m["word"]
        if word.upper() in _KEYWORDS:
            return _Tok("kw", word.upper())
        return _Tok("name", word, word)
    return _Tok("op", m["op"])


class _Parser:
    def __init__(self, text: str, tokens: list[_Tok]) -> None:
        self.text, self.tokens, self.i = text, tokens, 0

    def peek(self) -> _Tok:
        return self.tokens[self.i]

    def take(self, kind: str, text: str | None = None) -> _Tok | None:
        tok = self.peek()
        if tok.kind == kind and (text is None or tok.text == text):
            self.i += 1
            return tok
        return None

    def expect(self, kind: str, text: str | None = None) -> _Tok:
        tok = self.take(kind, text)
        if tok is None:
            wanted = text or {"end": "the end", "name": "a column name"}.get(kind, kind)
            raise ValidationError(
                f"Cannot parse filter {self.text!r}: expected {wanted}, found "
                f"{self.peek().text!r}; see `omnitable delete --help` for the syntax"
            )
        return tok

    def expr(self) -> pc.Expression:
        out = self.term()
        while self.take("kw", "OR"):
            out = out | self.term()
        return out

    def term(self) -> pc.Expression:
        out = self.factor()
        while self.take("kw", "AND"):
            out = out & self.factor()
        return out

    def factor(self) -> pc.Expression:
        if self.take("kw", "NOT"):
            return ~self.factor()
        if self.take("op", "("):
            inner = self.expr()
            self.expect("op", ")")
            return inner
        return self.predicate()

    def predicate(self) -> pc.Expression:
        field = pc.field(str(self.expect("name").value))
        if self.take("kw", "IS"):
            negate = self.take("kw", "NOT") is not None
            self.expect("kw", "NULL")
            return ~field.is_null() if negate else field.is_null()
        negate = self.take("kw", "NOT") is not None
        if negate or self.peek().text == "IN":
            self.expect("kw", "IN")
            self.expect("op", "(")
            values = [self.literal()]
            while self.take("op", ","):
                values.append(self.literal())
            self.expect("op", ")")
            found = field.isin(pa.array(values))
            return ~found if negate else found
        op = self.expect("op")
        if op.text not in _COMPARE:
            raise ValidationError(
                f"Cannot parse filter {self.text!r}: expected a comparison, found {op.text!r}"
            )
        return _COMPARE[op.text](field, pc.scalar(self.literal()))

    def literal(self) -> object:
        tok = self.peek()
        if tok.kind in ("num", "str"):
            self.i += 1
            return tok.value
        if self.take("kw", "TRUE"):
            return True
        if self.take("kw", "FALSE"):
            return False
        raise ValidationError(
            f"Cannot parse filter {self.text!r}: expected a value (a number, 'text', TRUE or "
            f"FALSE), found {tok.text!r}"
        )
