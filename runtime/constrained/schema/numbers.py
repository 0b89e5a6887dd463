"""Lowering of `type: integer` and `type: number` with minimum/maximum (inclusive, exclusive, draft-04
boolean form) and whole multipleOf, to one lexeme DFA each."""
from __future__ import annotations

import math
from typing import Optional

from ..automata.dfa_lowering import lower_char_fsm
from ..automata.intersect import intersect
from ..automata.json_numbers import INTEGER, NUMBER, integer_range, multiple_of_fsm, number_bound, number_range
from ..automata.regex import regex_to_char_fsm
from ..errors import GrammarError, UnsupportedSchemaError
from ..ir.nodes import LexNode
from .lowerer import Lowerer

MAX_MULTIPLE_OF = 10_000


def lower_integer(sc: Lowerer, s: dict, ptr: str) -> int:
    lo, lo_excl, hi, hi_excl = _bounds(s, ptr)
    k = _multiple(s, ptr)
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
    if k is not None and k > 1:
        r = integer_range(ilo, ihi) if (lo is not None or hi is not None) else INTEGER
        if r is None:
            return sc.never()

        def build():
            fsm = intersect(regex_to_char_fsm(r, False), multiple_of_fsm(k))
            return lower_char_fsm(fsm, False)
        return sc.add(LexNode(sc.dfa(("mult", r, k), build),
                              source=f"{_interval('integer', ilo, False, ihi, False)} multipleOf {k}"))
    if lo is None and hi is None:
        return sc.lex_regex(INTEGER, "integer")
    r = integer_range(ilo, ihi)
    return sc.lex_regex(r, _interval("integer", ilo, False, ihi, False)) if r else sc.never()


def lower_number(sc: Lowerer, s: dict, ptr: str) -> int:
    if _multiple(s, ptr) is not None:      # a whole multipleOf makes every valid number an integer
        return lower_integer(sc, s, ptr)
    lo, lo_excl, hi, hi_excl = _bounds(s, ptr)
    if lo is None and hi is None:
        return sc.lex_regex(NUMBER, "number")
    text = _interval("number", lo, lo_excl, hi, hi_excl)
    try:
        r = number_range(lo, lo_excl, hi, hi_excl)
    except ValueError:
        # fractional bounds: each side is a digit-by-digit comparison; intersect the two automata
        def build():
            sides = [regex_to_char_fsm(number_bound(v, op), False)
                     for v, op in ((lo, "gt" if lo_excl else "ge"), (hi, "lt" if hi_excl else "le"))
                     if v is not None]
            fsm = sides[0] if len(sides) == 1 else intersect(sides[0], sides[1])
            return lower_char_fsm(fsm, False)
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and not math.isfinite(v):
                raise GrammarError(f"{name} at {ptr} must be finite")
        d = sc.dfa(("numrange", lo, lo_excl, hi, hi_excl), build)
        return sc.add(LexNode(d, source=text)) if not d.is_empty() else sc.never()
    return sc.lex_regex(r, text) if r else sc.never()


def _interval(kind: str, lo, lo_excl: bool, hi, hi_excl: bool) -> str:
    """How a bounded number prints: `integer in [0, 120]`, `number in (0.5, ..)`."""
    if lo is None and hi is None:
        return kind
    return (f"{kind} in {'(' if lo_excl or lo is None else '['}{'..' if lo is None else lo}, "
            f"{'..' if hi is None else hi}{')' if hi_excl or hi is None else ']'}")


def _bounds(s: dict, ptr: str) -> tuple:
    """(lo, lo_exclusive, hi, hi_exclusive), the tighter of minimum/exclusiveMinimum (and maximum) winning."""
    lo = s.get("minimum")
    hi = s.get("maximum")
    lo_x = s.get("exclusiveMinimum")
    hi_x = s.get("exclusiveMaximum")
    lo_excl = hi_excl = False
    if isinstance(lo_x, bool):          # draft-04 form
        lo_excl = lo_x and lo is not None
    elif lo_x is not None:
        if lo is None or lo_x >= lo:
            lo, lo_excl = lo_x, True
    if isinstance(hi_x, bool):
        hi_excl = hi_x and hi is not None
    elif hi_x is not None:
        if hi is None or hi_x <= hi:
            hi, hi_excl = hi_x, True
    for name, v in (("minimum", lo), ("maximum", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise GrammarError(f"{name} at {ptr} must be a number")
    return lo, lo_excl, hi, hi_excl


def _multiple(s: dict, ptr: str) -> Optional[int]:
    """multipleOf as a whole number, None when absent; fractional or huge values are unsupported."""
    k = s.get("multipleOf")
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, (int, float)) or k <= 0:
        raise GrammarError(f"multipleOf at {ptr} must be a positive number")
    if k != int(k) or k > MAX_MULTIPLE_OF:
        raise UnsupportedSchemaError("multipleOf", ptr,
                                     f"only whole multipleOf values up to {MAX_MULTIPLE_OF} are supported")
    return int(k)
