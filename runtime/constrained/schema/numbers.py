"""Lowering of `type: integer` and `type: number` with minimum/maximum (inclusive, exclusive, draft-04
boolean form), multipleOf (whole or decimal steps) and the internal `$notMultipleOf` (from `not`), to one
lexeme DFA each. Each is built over the plain spellings (no exponent); the exact matcher then also takes the
exponent spellings of the same values within number_spellings' window (`1.1e1` for multipleOf 0.1, `1e+16`
above a minimum, `1e-07` for `not integer`), and refuses those outside it. Generation mode writes plain digits."""
from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Optional

from ..automata import rx
from ..automata.decimal_multiple import decimal_multiple_fsm, decimal_step
from ..automata.dfa_lowering import lower_char_fsm
from ..automata.grounding import exact_decimal, read_numbers, written_numbers
from ..automata.digit_range import digits_of, integer_range_fsm, number_range_fsm
from ..automata.intersect import intersect
from ..automata.json_numbers import (INTEGER, NUMBER, integer_with_exponent, multiple_of_fsm, number_bound,
                                     plain_literal)
from ..automata.number_spellings import with_exponents
from ..errors import GrammarError, UnsupportedSchemaError
from ..ir.nodes import LexNode
from .keywords import WRITTEN, reading_options, source_text, written_options
from .lowerer import Lowerer
from .standard import valid

MAX_MULTIPLE_OF = 10_000     # a step in units of its last decimal place (0.25 -> 25)
EXP_PLAIN_STATES = 1000      # the largest plain automaton that also gets its exponent spellings
MAX_PRODUCT_STATES = 60_000  # a bounded range times multipleOf's remainders (10**1000 with a step of 7: 28k)


def lower_written(sc: Lowerer, s: dict, ptr: str, integer: bool) -> int:
    """A number under `x-sglite-number`: one of the numbers its source text writes, as written, or read with
    one of its scales (a unit) and, where allowed, negated (the value then written plainly: 1.28 read in
    thousands is 1280), or, with `units`/`negative_words`, each read as its place in the text says
    (grounding.read_numbers); in every case one that satisfies the schema's other keywords (an integer schema:
    the whole ones)."""
    text = source_text(s, WRITTEN, ptr)
    rest = {k: v for k, v in s.items() if k != WRITTEN}
    reading = reading_options(s, ptr)
    if reading is not None:
        spellings = [_plain(v) for v in read_numbers(text, *reading)]
    else:
        scales, negate = written_options(s, ptr)
        spellings = []
        for w in written_numbers(text):
            for k in scales:
                for sign in ((1, -1) if negate else (1,)):
                    v = Decimal(w) * exact_decimal(k) * sign
                    spellings.append(w if (k == 1 and sign == 1) else _plain(v))
    ok: dict[str, None] = {}
    for spelled in spellings:
        v = Decimal(spelled)
        if (not integer or v == v.to_integral_value()) and valid(sc.doc, rest, json.loads(spelled), ptr):
            ok[spelled] = None
    if not ok:
        raise GrammarError(f"{WRITTEN} at {ptr}: the source text writes no number the schema allows")
    return sc.lex(rx.words(list(ok)), " | ".join(ok))


def _plain(v: Decimal) -> str:
    """`v` as a JSON number without exponent or needless zeros (1280, -3.1, 0.35)."""
    out = format(v.normalize(), "f")
    return "0" if out in ("-0", "") else out


def lower_integer(sc: Lowerer, s: dict, ptr: str) -> int:
    if WRITTEN in s:
        return lower_written(sc, s, ptr, True)
    if "$notMultipleOf" in s and any(_whole_step(v, ptr) == 1 for v in s["$notMultipleOf"]):
        return sc.never()          # not an integer (`not {type: integer}`)
    lo, lo_excl, hi, hi_excl = _bounds(s, ptr)
    k = _multiple(s, ptr)
    k = 1 if k is None else _whole_step(k, ptr)
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
    nots = tuple(sorted({_whole_step(v, ptr) for v in s.get("$notMultipleOf", [])}))
    text = _interval("integer", ilo, False, ihi, False)
    if ilo is not None and ihi is not None and ihi < ilo:
        return sc.never()
    if lo is None and hi is None and k == 1 and not nots:
        # the exact matcher takes every exponent spelling of a whole number in number_lexeme's window, as on every
        # number path, and more (integer_with_exponent holds the window's whole values: `15e5`, `1e+30` too), as
        # a tree, without the spellings' automaton; generation writes plain digits
        return sc.lex(INTEGER if sc.canonical else rx.alt(INTEGER, integer_with_exponent()), "integer")
    if k > MAX_MULTIPLE_OF or any(n > MAX_MULTIPLE_OF for n in nots):
        raise UnsupportedSchemaError("multipleOf", ptr, f"only steps up to {MAX_MULTIPLE_OF} are supported")

    def build():
        fsm = integer_range_fsm(ilo, ihi)       # O(digits) states, however large the bounds
        # the product has at most states x remainders: with long bounds, refused before it is built when that
        # passes the limit (short ones reach far fewer pairs, and intersect stops at the limit)
        if fsm.num_states > 64 and fsm.num_states * k * math.prod(n + 5 for n in nots) > MAX_PRODUCT_STATES:
            raise UnsupportedSchemaError("multipleOf", ptr, f"the bounds' {fsm.num_states} digit states times the "
                                         f"step's remainders pass {MAX_PRODUCT_STATES} automaton states")
        if k > 1:
            fsm = intersect(fsm, multiple_of_fsm(k), limit=MAX_PRODUCT_STATES)
        for n in nots:
            fsm = intersect(fsm, decimal_multiple_fsm(n, 0, multiple=False), limit=MAX_PRODUCT_STATES)
        return lower_char_fsm(fsm, False)
    text += (f" multipleOf {k}" if k > 1 else "") + "".join(f" not multipleOf {n}" for n in nots)
    try:
        return number_lexeme(sc, ("int", ilo, ihi, k, nots), build, text)
    except GrammarError as e:
        if k == 1 and not nots or isinstance(e, UnsupportedSchemaError):
            raise
        raise UnsupportedSchemaError("multipleOf", ptr, f"{e}: the bounds' digits times the step's remainders "
                                     f"pass {MAX_PRODUCT_STATES} automaton states") from None


def lower_number(sc: Lowerer, s: dict, ptr: str) -> int:
    if WRITTEN in s:
        return lower_written(sc, s, ptr, False)
    step = _multiple(s, ptr)
    if step is not None and step.denominator == 1:   # a whole multipleOf makes every valid number an integer
        return lower_integer(sc, s, ptr)
    lo, lo_excl, hi, hi_excl = _bounds(s, ptr)
    for name, v in (("minimum", lo), ("maximum", hi)):
        if isinstance(v, float) and not math.isfinite(v):
            raise GrammarError(f"{name} at {ptr} must be finite")
    text = _interval("number", lo, lo_excl, hi, hi_excl)
    steps = ((step,) if step is not None else ()) + tuple(_step(v, ptr) for v in s.get("$notMultipleOf", []))
    if steps:
        # decimal steps: digit-wise remainders over the plain spellings (_lexeme adds the exponent spellings)
        parts = [decimal_step(x) for x in steps]
        for m, _ in parts:
            if m > MAX_MULTIPLE_OF:
                raise UnsupportedSchemaError("multipleOf", ptr, f"step {m} (in units of its last decimal "
                                             f"place) is larger than {MAX_MULTIPLE_OF}")
        flags = (True,) * (step is not None) + (False,) * (len(steps) - (step is not None))

        def build_steps():
            fsm = _range_fsm(lo, lo_excl, hi, hi_excl)
            for (m, sc_), flag in zip(parts, flags):
                fsm = intersect(fsm, decimal_multiple_fsm(m, sc_, multiple=flag))
            return lower_char_fsm(fsm, False)
        text += "".join(f" {'' if f else 'not '}multipleOf {float(x):g}" for x, f in zip(steps, flags))
        try:
            return number_lexeme(sc, ("decmult", lo, lo_excl, hi, hi_excl, tuple(zip(parts, flags))), build_steps, text)
        except OverflowError as e:
            raise UnsupportedSchemaError("multipleOf", ptr, str(e)) from None
    if lo is None and hi is None:
        return sc.lex(NUMBER, "number")
    if lo is not None and hi is not None and (hi < lo or (hi == lo and (lo_excl or hi_excl))):
        return sc.never()
    return number_lexeme(sc, ("numrange", lo, lo_excl, hi, hi_excl),
                   lambda: lower_char_fsm(_range_fsm(lo, lo_excl, hi, hi_excl), False), text)


def number_lexeme(sc: Lowerer, key: tuple, build, text: str) -> int:
    """The number lexeme whose plain spellings `build` makes: in the exact matcher with its exponent spellings
    too (number_spellings.with_exponents), in generation mode as it is. Past EXP_PLAIN_STATES plain states (a
    large multipleOf's remainders), or where the spellings' automaton would pass its state limit, only the
    plain spellings are taken: an exponent spelling is then refused, never accepted unchecked."""
    d = sc.dfa(key, build)
    if d.is_empty():
        return sc.never()
    if not sc.canonical and d.num_states <= EXP_PLAIN_STATES:
        plain = d

        def spelled():
            try:
                return with_exponents(plain)
            except OverflowError:
                return plain
        d = sc.dfa(("exp",) + key, spelled)
    return sc.add(LexNode(d, source=text))


def literal_numbers(sc: Lowerer, values: list) -> int:
    """The lexeme of the JSON numbers equal to one of `values` (ints or floats), in every plain spelling and, in
    the exact matcher, the exponent spellings of number_lexeme's window: the same rule as every number path."""
    tree = rx.alt(*sorted({plain_literal(v) for v in values}, key=rx.show))
    return number_lexeme(sc, ("lits", tree), lambda: lower_char_fsm(rx.to_char_fsm(tree), False),
                         " | ".join(json.dumps(v) for v in values))


def _range_fsm(lo, lo_excl: bool, hi, hi_excl: bool):
    """CharFSM of the numbers (no exponent) in the interval; either bound may be None. Whole bounds (of any
    size) make one digit automaton; a fractional one (a float, so at most 17 digits) is compared digit by digit
    in a regex of its own, intersected with the other side."""
    whole = [v is None or _is_whole(v) for v in (lo, hi)]
    if all(whole):
        fsm = number_range_fsm(_whole(lo), lo_excl, _whole(hi), hi_excl)
        return fsm if fsm is not None else rx.to_char_fsm(rx.NEVER)
    sides = []
    if lo is not None:
        sides.append(number_range_fsm(int(lo), lo_excl, None, False) if _is_whole(lo) else
                     rx.to_char_fsm(number_bound(lo, "gt" if lo_excl else "ge")))
    if hi is not None:
        sides.append(number_range_fsm(None, False, int(hi), hi_excl) if _is_whole(hi) else
                     rx.to_char_fsm(number_bound(hi, "lt" if hi_excl else "le")))
    return sides[0] if len(sides) == 1 else intersect(sides[0], sides[1])


def _is_whole(v) -> bool:
    return isinstance(v, int) or (isinstance(v, float) and v.is_integer())


def _whole(v) -> Optional[int]:
    return None if v is None else int(v)


def _interval(kind: str, lo, lo_excl: bool, hi, hi_excl: bool) -> str:
    """How a bounded number prints: `integer in [0, 120]`, `number in (0.5, ..)`."""
    if lo is None and hi is None:
        return kind
    return (f"{kind} in {'(' if lo_excl or lo is None else '['}{'..' if lo is None else _short(lo)}, "
            f"{'..' if hi is None else _short(hi)}{')' if hi_excl or hi is None else ']'}")


def _short(v) -> str:
    """A bound as it prints in a lexeme's source: a whole number past 20 digits in exponent form."""
    if isinstance(v, int) and abs(v) >= 10 ** 20:
        d = digits_of(abs(v))
        return ("-" if v < 0 else "") + f"{d[0]}.{d[1:7]}..e{len(d) - 1}"
    return str(v)


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


def _multiple(s: dict, ptr: str) -> Optional[Fraction]:
    """multipleOf as an exact fraction (0.1 is 1/10), None when absent."""
    k = s.get("multipleOf")
    return None if k is None else _step(k, ptr, "multipleOf")


def _step(k, ptr: str, name: str = "multipleOf") -> Fraction:
    if isinstance(k, bool) or not isinstance(k, (int, float, Fraction, Decimal)) or k <= 0:
        raise GrammarError(f"{name} at {ptr} must be a positive number")
    if isinstance(k, float) and not math.isfinite(k):
        raise GrammarError(f"{name} at {ptr} must be finite")
    try:
        m, sc_ = decimal_step(k)
    except ValueError as e:
        raise UnsupportedSchemaError("multipleOf", ptr, str(e)) from None
    return Fraction(m, 10 ** sc_)


def _whole_step(k, ptr: str) -> int:
    """The whole number n such that an integer is a multiple of `k` iff it is one of n."""
    f = k if isinstance(k, Fraction) else _step(k, ptr)
    return f.numerator     # integer i * denominator divisible by numerator <=> numerator | i (coprime)
