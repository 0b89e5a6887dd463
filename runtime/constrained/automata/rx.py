"""Regular expressions built in code, as trees: what the number, literal, GBNF and whitespace lowerings hand the
automaton builder, never regex text. A tree is immutable and hashable (it is its own cache key), prints as regex
text for people (`show`, never parsed again), and is built into a CharFSM by the same builder a user's regex goes
through (regex_nfa.build_char_fsm, after the same size checks), from the parsed form that builder reads.

    Lit(text)                  the characters of `text`
    Cls(ranges, negated)       one character in (or, negated, not in) the code point ranges [(lo, hi), ...]
    Seq(items)                 the items one after another (Seq(()) matches the empty text)
    Alt(items)                 one of them (Alt(()) matches nothing)
    Rep(item, lo, hi)          item lo to hi times (hi None: unbounded)

Nodes carry their kind as a last, defaulted field, so nodes of different kinds never compare equal."""
from __future__ import annotations

from typing import NamedTuple, Optional

from .charfsm import CharFSM


class Lit(NamedTuple):
    text: str
    kind: str = "lit"


class Cls(NamedTuple):
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False
    kind: str = "cls"


class Seq(NamedTuple):
    items: tuple
    kind: str = "seq"


class Alt(NamedTuple):
    items: tuple
    kind: str = "alt"


class Rep(NamedTuple):
    item: "Rx"
    lo: int
    hi: Optional[int]
    kind: str = "rep"


Rx = Lit | Cls | Seq | Alt | Rep
NEVER = Alt(())
EMPTY = Seq(())
DIGIT = Cls(((0x30, 0x39),))
NONZERO = Cls(((0x31, 0x39),))


def chars(text: str) -> Cls:
    """One of the characters of `text`."""
    return Cls(tuple((ord(c), ord(c)) for c in sorted(set(text))))


def seq(*items) -> Rx:
    """The items in order; str items are literals; nested sequences flattened."""
    out: list = []
    for x in items:
        x = Lit(x) if isinstance(x, str) else x
        if x.kind == "seq":
            out.extend(x.items)
        elif not (x.kind == "lit" and not x.text):
            out.append(x)
    return out[0] if len(out) == 1 else Seq(tuple(out))


def alt(*items) -> Rx:
    """One of the items (None items left out: the empty language); str items are literals."""
    out: list = []
    for x in items:
        if x is None:
            continue
        x = Lit(x) if isinstance(x, str) else x
        for y in x.items if x.kind == "alt" else (x,):
            if y not in out:
                out.append(y)
    return out[0] if len(out) == 1 else Alt(tuple(out))


def rep(item, lo: int, hi: Optional[int] = None) -> Rx:
    item = Lit(item) if isinstance(item, str) else item
    return item if lo == hi == 1 else Rep(item, lo, hi)


def opt(item) -> Rx:
    return rep(item, 0, 1)


def star(item) -> Rx:
    return rep(item, 0, None)


def plus(item) -> Rx:
    return rep(item, 1, None)


def words(texts) -> Rx:
    """One of the literal texts."""
    return alt(*(Lit(t) for t in texts)) if texts else NEVER


# --- printing --------------------------------------------------------------------------------------------------
_SPECIAL = set("\\.^$|?*+()[]{}")
_CLASS_SPECIAL = set("\\]^-")


def show(t: Rx) -> str:
    """`t` as regex text (for printing; equal trees print alike)."""
    k = t.kind
    if k == "lit":
        return "".join(_char(c, _SPECIAL) for c in t.text)
    if k == "cls":
        body = "".join(_char(chr(a), _CLASS_SPECIAL) if a == b else
                       f"{_char(chr(a), _CLASS_SPECIAL)}-{_char(chr(b), _CLASS_SPECIAL)}" for a, b in t.ranges)
        return f"[{'^' if t.negated else ''}{body}]" if body or t.negated else "(?!)"
    if k == "seq":
        return "".join(show(x) if x.kind != "alt" else f"({show(x)})" for x in t.items)
    if k == "alt":
        return "|".join(show(x) for x in t.items) if t.items else "(?!)"
    inner = show(t.item)
    if not (t.item.kind == "cls" or (t.item.kind == "lit" and len(t.item.text) == 1)):
        inner = f"({inner})"
    count = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((t.lo, t.hi))
    if count is None:
        count = f"{{{t.lo}}}" if t.lo == t.hi else f"{{{t.lo},{'' if t.hi is None else t.hi}}}"
    return inner + count


def _char(c: str, special) -> str:
    if c in special:
        return "\\" + c
    o = ord(c)
    if o < 0x20 or o == 0x7F:
        return {9: "\\t", 10: "\\n", 13: "\\r"}.get(o, f"\\x{o:02x}")
    return c


# --- building ---------------------------------------------------------------------------------------------------
def to_char_fsm(t: Rx, name: str | None = None) -> CharFSM:
    """The CharFSM of `t` (whole-text match), through the builder and size checks a regex's parse goes
    through. `name` names it in errors (default: its printed form)."""
    from .regex import tree_to_char_fsm
    return tree_to_char_fsm(_sre(t), name or show(t))


def _sre(t: Rx):
    """`t` in the parsed form of Python's regex parser (re._parser.SubPattern), which the builder reads."""
    from re import _constants as c, _parser as p
    state = p.State()

    def sub(items) -> "p.SubPattern":
        return p.SubPattern(state, list(items))

    def items(x) -> list:
        k = x.kind
        if k == "lit":
            return [(c.LITERAL, ord(ch)) for ch in x.text]
        if k == "cls":
            spans = [(c.LITERAL, a) if a == b else (c.RANGE, (a, b)) for a, b in x.ranges]
            if x.negated:
                return [(c.IN, [(c.NEGATE, None)] + spans)]
            return [(c.IN, spans)] if spans else [(c.ASSERT_NOT, (1, sub([])))]
        if k == "seq":
            return [i for y in x.items for i in items(y)]
        if k == "alt":
            if not x.items:
                return [(c.ASSERT_NOT, (1, sub([])))]
            if len(x.items) == 1:
                return items(x.items[0])
            return [(c.BRANCH, (None, [sub(items(y)) for y in x.items]))]
        return [(c.MAX_REPEAT, (x.lo, c.MAXREPEAT if x.hi is None else x.hi, sub(items(x.item))))]

    return sub(items(t))
