"""JSON numbers written without exponent that are (or are not) whole multiples of a decimal step: the
`multipleOf` automaton for steps like 0.01 or 1.5 (a whole step is the case `scale == 0`)."""
from __future__ import annotations

from fractions import Fraction

from .charfsm import CharFSM, make_ranges

MAX_STATES = 20_000


def decimal_step(step) -> tuple[int, int]:
    """(m, s) with step == m / 10**s exactly, for a positive JSON number given as int, float, Decimal or
    Fraction (a float is read as its shortest decimal spelling, 0.1 -> (1, 1)). ValueError if `step` has no
    finite decimal expansion."""
    f = Fraction(repr(step)) if isinstance(step, float) else Fraction(step)
    s = 0
    while (f * 10 ** s).denominator != 1:
        s += 1
        if s > 30:
            raise ValueError(f"multipleOf {step} has no short decimal expansion")
    return int(f * 10 ** s), s


def decimal_multiple_fsm(m: int, s: int, multiple: bool = True) -> CharFSM:
    """CharFSM over `-?(0|[1-9][0-9]*)(\\.[0-9]+)?` accepting the numbers x with x * 10**s a whole multiple of
    m (`multiple`), or those without (not `multiple`). States track the remainder of the digits read so far
    (as an integer scaled by 10**s) and how many fraction digits were read; digits past the s-th must be zeros
    for a multiple. Raises OverflowError when m * (s + 3) passes MAX_STATES."""
    if m * (s + 3) + 4 > MAX_STATES:
        raise OverflowError(f"multipleOf needs {m * (s + 3)} automaton states (limit {MAX_STATES})")
    index: dict[tuple, int] = {}
    trans: list[list] = []

    def sid(key: tuple) -> int:
        if key not in index:
            index[key] = len(trans)
            trans.append([])
        return index[key]

    def is_multiple(key: tuple) -> bool:
        kind = key[0]
        if kind == "int":                     # ("int", r): integer digits, remainder r
            return key[1] * 10 ** s % m == 0
        if kind == "frac":                    # ("frac", p, r): p <= s fraction digits read
            return key[2] * 10 ** (s - key[1]) % m == 0
        if kind == "over":                    # ("over", r, nonzero): past s fraction digits
            return not key[2] and key[1] % m == 0
        return False

    start = sid(("start",))
    todo = [("start",)]
    accept: dict[int, bool] = {}
    zero = ord("0")
    while todo:
        key = todo.pop()
        here = index[key]
        edges: list[tuple[int, int, int]] = []

        def go(c: int, nxt: tuple) -> None:
            new = nxt not in index
            edges.append((c, c, sid(nxt)))
            if new:
                todo.append(nxt)
        kind = key[0]
        if kind in ("start", "minus"):
            if kind == "start":
                go(ord("-"), ("minus",))
            go(zero, ("int", 0, "z"))
            for d in range(1, 10):
                go(zero + d, ("int", d % m))
        elif kind == "int":
            if len(key) == 2:                 # not the lone leading zero: more digits allowed
                for d in range(10):
                    go(zero + d, ("int", (10 * key[1] + d) % m))
            go(ord("."), ("dot", key[1]))
        elif kind == "dot" or kind == "frac":
            p, r = (0, key[1]) if kind == "dot" else (key[1], key[2])
            for d in range(10):
                go(zero + d, ("frac", p + 1, (10 * r + d) % m) if p < s else ("over", r, d != 0))
        elif kind == "over":
            for d in range(10):
                go(zero + d, ("over", key[1], key[2] or d != 0))
        trans[here] = edges
        ok = is_multiple(key[:2] if kind == "int" else key)
        if kind in ("int", "frac", "over") and ok == multiple:
            accept[here] = True
    if len(trans) > MAX_STATES:
        raise OverflowError(f"multipleOf automaton passed {MAX_STATES} states")
    return CharFSM(start, tuple(make_ranges(t) for t in trans), accept)
