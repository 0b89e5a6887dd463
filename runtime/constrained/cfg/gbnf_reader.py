"""GBNF (llama.cpp's grammar format) text -> rules of expression trees.

    root   ::= object
    object ::= "{" ws ( pair ( "," ws pair )* )? "}"     # comments run to the end of the line
    pair   ::= [a-z]+ ":" ws [0-9]{1,3}
    ws     ::= [ \\t\\n]*

Strings "..." and classes [...] / [^...] take the escapes \\n \\r \\t \\\\ \\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH;
`.` is any character; `*` `+` `?` `{m}` `{m,}` `{m,n}` `{,n}` repeat; `( )` groups; `|` separates alternatives.
A rule runs until the next `name ::=` (so line breaks are free, a superset of llama.cpp's layout)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

from ..errors import GrammarError


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    ranges: tuple[tuple[int, int], ...]
    negated: bool


@dataclass(frozen=True)
class AnyChar:
    pass


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple["Expr", ...]


@dataclass(frozen=True)
class Alt:
    options: tuple["Expr", ...]


@dataclass(frozen=True)
class Rep:
    item: "Expr"
    min: int
    max: Optional[int]


Expr = Union[Lit, Cls, AnyChar, Ref, Seq, Alt, Rep]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_DEFINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*::=")
_SPACE = re.compile(r"(?:\s|#[^\n]*)*")
_REPEAT = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}")
_SIMPLE_ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^",
               "/": "/", "'": "'"}
_MAX_REPEAT = 10_000


def read_gbnf(text: str) -> dict[str, Expr]:
    """Rules in definition order (name -> expression). Raises GrammarError with the line and column."""
    return _Reader(text).rules()


class _Reader:
    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def fail(self, msg: str) -> GrammarError:
        line = self.text.count("\n", 0, self.pos) + 1
        col = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        return GrammarError(f"GBNF line {line} column {col}: {msg}")

    def space(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()

    def rules(self) -> dict[str, Expr]:
        out: dict[str, Expr] = {}
        self.space()
        while self.pos < len(self.text):
            m = _DEFINE.match(self.text, self.pos)
            if m is None:
                raise self.fail("expected a rule definition `name ::= ...`")
            name = m.group(1)
            if name in out:
                raise self.fail(f"rule {name!r} is defined twice")
            self.pos = m.end()
            out[name] = self.alternatives(nested=False)
            self.space()
        if not out:
            raise GrammarError("GBNF grammar has no rules")
        return out

    def alternatives(self, nested: bool) -> Expr:
        options = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.sequence(nested))
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def peek(self) -> str:
        self.space()
        return self.text[self.pos:self.pos + 1]

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while True:
            c = self.peek()
            if not c or c in "|)" or (not nested and _DEFINE.match(self.text, self.pos)):
                break
            items.append(self.repeat(self.primary()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def primary(self) -> Expr:
        c = self.text[self.pos]
        if c == '"':
            return Lit(self.string())
        if c == "[":
            return self.char_class()
        if c == ".":
            self.pos += 1
            return AnyChar()
        if c == "(":
            self.pos += 1
            inner = self.alternatives(nested=True)
            if self.peek() != ")":
                raise self.fail("expected ')'")
            self.pos += 1
            return inner
        m = _NAME.match(self.text, self.pos)
        if m is None:
            raise self.fail(f"unexpected {c!r}")
        self.pos = m.end()
        return Ref(m.group(0))

    def repeat(self, item: Expr) -> Expr:
        while True:
            c = self.peek()
            if c in ("*", "+", "?") and c:
                self.pos += 1
                item = Rep(item, 0 if c != "+" else 1, None if c != "?" else 1)
            elif c == "{":
                m = _REPEAT.match(self.text, self.pos)
                if m is None:
                    raise self.fail("expected a repetition {m}, {m,}, {m,n} or {,n}")
                lo, comma, hi = m.groups()
                if not lo and not comma:
                    raise self.fail("empty repetition {}")
                mn = int(lo) if lo else 0
                mx = (int(hi) if hi else None) if comma else mn
                if mx is not None and mx < mn:
                    raise self.fail(f"repetition {{{mn},{mx}}}: the maximum is below the minimum")
                if max(mn, mx or 0) > _MAX_REPEAT:
                    raise self.fail(f"repetition bound above {_MAX_REPEAT}")
                self.pos = m.end()
                item = Rep(item, mn, mx)
            else:
                return item

    def string(self) -> str:
        self.pos += 1
        out = []
        while True:
            if self.pos >= len(self.text):
                raise self.fail("unterminated string")
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            out.append(chr(self.char()))

    def char_class(self) -> Cls:
        self.pos += 1
        negated = self.text.startswith("^", self.pos)
        if negated:
            self.pos += 1
        ranges = []
        while True:
            if self.pos >= len(self.text):
                raise self.fail("unterminated character class")
            if self.text[self.pos] == "]":
                self.pos += 1
                break
            lo = self.char()
            hi = lo
            if self.text.startswith("-", self.pos) and self.text[self.pos + 1:self.pos + 2] not in ("]", ""):
                self.pos += 1
                hi = self.char()
                if hi < lo:
                    raise self.fail(f"character range {chr(lo)!r}-{chr(hi)!r} is reversed")
            ranges.append((lo, hi))
        return Cls(tuple(ranges), negated)

    def char(self) -> int:
        """One character of a string or class (escapes decoded), as a codepoint."""
        c = self.text[self.pos]
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.text[self.pos + 1:self.pos + 2]
        if e in _SIMPLE_ESC:
            self.pos += 2
            return ord(_SIMPLE_ESC[e])
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is None:
            raise self.fail(f"unknown escape \\{e}")
        digits = self.text[self.pos + 2:self.pos + 2 + width]
        if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise self.fail(f"\\{e} needs {width} hex digits")
        cp = int(digits, 16)
        if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            raise self.fail(f"\\{e}{digits} is not a Unicode scalar value")
        self.pos += 2 + width
        return cp
