"""JSON numbers, the plain spellings of literal values, and fractional bounds, as regex trees (rx.py) (ranges
between whole bounds are digit automata built directly: digit_range.py; exponent spellings are added to the plain
automata by number_spellings.py, one rule for every number path)."""
from __future__ import annotations

from decimal import Decimal
from typing import Optional

from .rx import DIGIT, NONZERO, Cls, Lit, Rx, alt, chars, opt, plus, rep, seq, star

NATURAL = alt("0", seq(NONZERO, star(DIGIT)))          # no leading zeros
NUMBER = seq(opt("-"), NATURAL, opt(seq(".", plus(DIGIT))), opt(seq(chars("eE"), opt(chars("+-")), plus(DIGIT))))
FRAC_ANY, FRAC_ZERO = opt(seq(".", plus(DIGIT))), opt(seq(".", plus("0")))
INTEGER = seq(opt("-"), NATURAL, FRAC_ZERO)            # 1.0 is an integer in JSON Schema


def _digits(a: int, b: int) -> Cls:
    return Cls(((0x30 + a, 0x30 + b),))


def _same_len(x: str, y: str) -> Rx:
    """Digit strings of len(x) between x and y inclusive (leading zeros allowed)."""
    if x == y:
        return Lit(x)
    i = 0
    while x[i] == y[i]:
        i += 1
    prefix, x, y = x[:i], x[i:], y[i:]
    n = len(x) - 1
    if n == 0:
        return seq(prefix, _digits(int(x), int(y)))
    if x[1:] == "0" * n and y[1:] == "9" * n:
        return seq(prefix, _digits(int(x[0]), int(y[0])), rep(DIGIT, n, n))
    parts = []
    lo_d, hi_d = int(x[0]), int(y[0])
    if x[1:] == "0" * n:
        lo_d -= 1
    else:
        parts.append(seq(x[0], _same_len(x[1:], "9" * n)))
    if y[1:] == "9" * n:
        hi_d += 1
    if lo_d + 1 <= hi_d - 1:
        parts.append(seq(_digits(lo_d + 1, hi_d - 1), rep(DIGIT, n, n)))
    if y[1:] != "9" * n:
        parts.append(seq(y[0], _same_len("0" * n, y[1:])))
    return seq(prefix, alt(*parts))


def nat_range(a: int, b: Optional[int]) -> Optional[Rx]:
    """Decimal naturals (no leading zeros) in [a, b]; b None = unbounded. None if empty."""
    a = max(a, 0)
    if b is not None and b < a:
        return None
    parts = []
    la = len(str(a))
    top = b if b is not None else 10 ** la - 1
    for length in range(la, len(str(top)) + 1):
        lo = max(a, 10 ** (length - 1) if length > 1 else 0)
        hi = min(top, 10 ** length - 1)
        if lo > hi:
            continue
        parts.append(_same_len(str(lo), str(hi)))
    if b is None:
        parts.append(seq(NONZERO, rep(DIGIT, la, None)))
    return alt(*parts)


# An unbounded integer's exponent spellings beyond number_spellings' window: any exponent after a whole mantissa,
# and the decimal point moved at most this many places (`15e5`, `1.23456e5`, `1000e-3`): a whole number's
# spellings need no automaton of the plain ones, so they come cheap as a tree (see integer_with_exponent).
EXP_SHIFT = 6


def integer_with_exponent() -> Rx:
    """The JSON numbers written with an exponent whose value is a whole number, the decimal point moved at most
    EXP_SHIFT places or a whole mantissa (1e2, 1.5e1, 0.0e7, 100e-2, 1.50E+001, 15e30)."""
    e = chars("eE")
    parts = [seq("0", FRAC_ZERO, e, opt(chars("+-")), plus(DIGIT)),                      # zero, any exponent
             seq(NONZERO, star(DIGIT), FRAC_ZERO, e, alt(seq(opt("+"), plus(DIGIT)), seq("-", plus("0"))))]
    for places in range(1, EXP_SHIFT + 1):
        # `places` fraction digits up to the last non-zero one: the exponent must be at least that
        parts.append(seq(NATURAL, ".", rep(DIGIT, places - 1, places - 1), NONZERO, star("0"), e, opt("+"),
                         star("0"), nat_range(places, None)))
        # a negative exponent: as many trailing zeros in the whole mantissa
        parts.append(seq(NONZERO, star(DIGIT), rep("0", places, places), FRAC_ZERO, e, "-", star("0"), str(places)))
    return seq(opt("-"), alt(*parts))


def plain_literal(v) -> Rx:
    """Every plain spelling (no exponent) of the JSON number v, an int or a finite float read as its shortest
    decimal (0.1): `1`, `1.0`, `1.00` for 1; `-0` too for 0; `0.0000001` and `0.00000010` for 1e-07; all the
    digits of 1e+16."""
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    if not d.is_finite():
        raise ValueError(f"{v!r} is not a JSON number")
    sign = "-" if d < 0 else opt("-") if d == 0 else ""
    if d == d.to_integral_value():
        return seq(sign, format(abs(d).to_integral_value(), "f"), FRAC_ZERO)
    return seq(sign, format(abs(d), "f").rstrip("0"), star("0"))


def multiple_of_fsm(k: int):
    """CharFSM for JSON integers divisible by k (also spelled with a `.0+` tail, and `-0`)."""
    from .charfsm import CharFSM, make_ranges
    # states: 0 start, 1 after '-', 2 "0" (zero), 3 after '.', 4 zeros after '.', 5 + r: digits with remainder r
    n = 5 + k
    trans: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    zero = ord("0")
    for s in (0, 1):
        trans[s].append((zero, zero, 2))
        for d in range(1, 10):
            trans[s].append((zero + d, zero + d, 5 + d % k))
    trans[0].append((ord("-"), ord("-"), 1))
    for r in range(k):
        for d in range(10):
            trans[5 + r].append((zero + d, zero + d, 5 + (10 * r + d) % k))
        if r == 0:
            trans[5].append((ord("."), ord("."), 3))
    trans[2].append((ord("."), ord("."), 3))
    trans[3].append((zero, zero, 4))
    trans[4].append((zero, zero, 4))
    finals = {2: True, 4: True, 5: True}
    return CharFSM(0, tuple(make_ranges(t) for t in trans), finals)


def _frac(d: str, op: str) -> Optional[Rx]:
    """Fraction digit strings F (non-empty) with 0.F `op` 0.d, where d has no trailing zeros."""
    nonzero = seq(star(DIGIT), NONZERO, star(DIGIT))
    if not d:
        return {"ge": plus(DIGIT), "gt": nonzero, "le": plus("0"), "lt": None}[op]
    h, rest = int(d[0]), d[1:]
    parts = []
    if op in ("ge", "gt") and h < 9:
        parts.append(seq(_digits(h + 1, 9), star(DIGIT)))
    if op in ("le", "lt") and h > 0:
        parts.append(seq(_digits(0, h - 1), star(DIGIT)))
    if rest:
        sub = _frac(rest, op)
    else:   # F = d followed by more digits
        sub = {"ge": star(DIGIT), "gt": nonzero, "le": star("0"), "lt": None}[op]
    if sub is not None:
        # for <=/<, F may also stop right after h when d goes on (the rest of d is > 0)
        parts.append(seq(str(h), opt(sub) if rest and op in ("le", "lt") else sub))
    elif rest and op in ("le", "lt"):
        parts.append(Lit(str(h)))
    return alt(*parts) if parts else None


def _magnitude_bound(bound: Decimal, op: str) -> Optional[Rx]:
    """Unsigned decimals m (no exponent) with m `op` bound (a Decimal >= 0)."""
    ip = int(bound)
    fd = format(bound - ip, "f").split(".")[1].rstrip("0") if bound != ip else ""
    parts = []
    r = nat_range(ip + 1, None) if op in ("ge", "gt") else nat_range(0, ip - 1) if ip >= 1 else None
    if r is not None:
        parts.append(seq(r, FRAC_ANY))
    f = _frac(fd, op)
    # the integer spelling (no fraction) has 0.F = 0
    zero_ok = {"ge": not fd, "gt": False, "le": True, "lt": bool(fd)}[op]
    if f is not None and zero_ok:
        parts.append(seq(str(ip), opt(seq(".", f))))
    elif f is not None:
        parts.append(seq(str(ip), ".", f))
    elif zero_ok:
        parts.append(Lit(str(ip)))
    return alt(*parts) if parts else None


def number_bound(v, op: str) -> Rx:
    """JSON numbers x (no exponent form) with x `op` v, op in ge/gt/le/lt; v any finite number."""
    d = Decimal(repr(float(v))) if isinstance(v, float) else Decimal(v)
    flip = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}
    neg_zero = seq("-0", FRAC_ZERO)                                       # -0 == 0
    parts: list = []
    if op in ("ge", "gt"):
        if d >= 0:
            parts.append(_magnitude_bound(d, op))
            if d == 0 and op == "ge":
                parts.append(neg_zero)
        else:
            parts.append(seq(NATURAL, FRAC_ANY))                           # every x >= 0
            r = _magnitude_bound(-d, flip[op])                              # -m op d  <=>  m flip(op) -d
            parts.append(seq("-", r) if r is not None else None)
    else:
        if d < 0:
            r = _magnitude_bound(-d, flip[op])
            parts.append(seq("-", r) if r is not None else None)
        else:
            parts.append(seq("-", _magnitude_bound(d * 0, "gt")))           # every x < 0
            if op == "le" or d > 0:
                parts.append(neg_zero)
            parts.append(_magnitude_bound(d, op))
    return alt(*parts)
