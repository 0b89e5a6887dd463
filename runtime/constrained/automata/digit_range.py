"""JSON numbers between integer bounds as a digit automaton built directly, with O(digits) states whatever the
bounds' size (`maximum: 10**1000`): no regex text, which for a bound of d digits is O(d^2) positions.

The automaton reads a magnitude's integer digits (no leading zeros) comparing them, as they come, with the
bounds' digits: a state is (k digits read, how the prefix compares with the lower bound's first k digits, and
with the upper bound's). A prefix longer than the lower bound is above it whatever comes next; a number with as
many digits as a bound compares as its prefix does; one with more digits than the upper bound is dead. Where
the integer digits end, the same comparisons say which fraction may follow: any, only zeros (`1.0` is 1), a
non-zero one (just above an exclusive bound), or none. A side for each sign: `-m` reads the magnitude against
the negated bounds, and `-0` is 0."""
from __future__ import annotations

from decimal import Decimal

from ..budget import checkpoint
from .charfsm import CharFSM, make_ranges

_ZERO, _DOT, _MINUS = ord("0"), ord("."), ord("-")
# what may follow a magnitude's integer digits: a fraction of any value, of value zero, of value above zero
_ANY, _ZEROS, _NONZERO = "any", "zeros", "nonzero"


def digits_of(n: int) -> str:
    """The decimal digits of a natural number of any size (str() refuses past 4,300 digits)."""
    return format(Decimal(n), "f")


def integer_range_fsm(lo: int | None, hi: int | None) -> CharFSM | None:
    """JSON integers in [lo, hi] (either may be None) in every plain spelling: `-0` for 0, `1.0` and `1.00` for
    1, no leading zeros. None if the range is empty."""
    if lo is not None and hi is not None and hi < lo:
        return None
    return _Builder(integers=True).build(lo, False, hi, False)


def number_range_fsm(lo: int | None, lo_excl: bool, hi: int | None, hi_excl: bool) -> CharFSM | None:
    """JSON numbers (plain spellings, no exponent) in the interval between integer bounds (either None), each
    bound inclusive or exclusive. None if the interval is empty."""
    if lo is not None and hi is not None and (hi < lo or (hi == lo and (lo_excl or hi_excl))):
        return None
    return _Builder(integers=False).build(lo, lo_excl, hi, hi_excl)


class _Builder:
    """Collects states as lists of (lo, hi, target) codepoint ranges; finals are accepting states."""

    def __init__(self, integers: bool):
        self.integers = integers
        self.trans: list[list[tuple[int, int, int]]] = []
        self.finals: set[int] = set()
        self.tails: dict[str, int] = {}

    def new(self, final: bool = False) -> int:
        if len(self.trans) % 1024 == 0:
            checkpoint("an integer range's digit automaton")
        self.trans.append([])
        if final:
            self.finals.add(len(self.trans) - 1)
        return len(self.trans) - 1

    def build(self, lo, lo_excl: bool, hi, hi_excl: bool) -> CharFSM | None:
        start = self.new()
        live = False
        # x >= 0: the magnitude is x
        if hi is None or hi > 0 or (hi == 0 and not hi_excl):
            a, a_incl = (0, True) if lo is None or lo < 0 else (lo, not lo_excl)
            live |= self.magnitude(start, a, a_incl, hi, not hi_excl)
        # x <= 0: the magnitude is -x (so `-0`, equal to 0, is in when 0 is)
        if lo is None or lo < 0 or (lo == 0 and not lo_excl):
            a, a_incl = (0, True) if hi is None or hi > 0 else (-hi, not hi_excl)
            b, b_incl = (None, False) if lo is None else (-lo, not lo_excl)
            minus = self.new()
            if self.magnitude(minus, a, a_incl, b, b_incl):
                self.trans[start].append((_MINUS, _MINUS, minus))
                live = True
        if not live:
            return None
        return CharFSM(start, tuple(make_ranges(t) for t in self.trans), dict.fromkeys(self.finals, True))

    def magnitude(self, start: int, a: int, a_incl: bool, b: int | None, b_incl: bool) -> bool:
        """Adds from `start` the magnitudes m (no sign) with a <= m <= b, each end inclusive or not (b None:
        unbounded). Returns whether any state accepts."""
        da = digits_of(a)
        db = None if b is None else digits_of(b)
        la, lb = len(da), (None if db is None else len(db))
        index: dict[tuple, int] = {}
        todo: list[tuple] = []
        any_final = False

        def state(key: tuple) -> int:
            nonlocal any_final
            s = index.get(key)
            if s is None:
                tail = self.tail(*self.relations(key, la, lb), a_incl, b_incl)
                s = index[key] = self.new(tail in (_ANY, _ZEROS))
                any_final |= tail is not None
                if tail is not None:
                    self.trans[s].append((_DOT, _DOT, self.tail_state(tail)))
                todo.append(key)
            return s

        def cmp(d: int, bound: str, k: int) -> int:
            return (d > int(bound[k])) - (d < int(bound[k]))

        zero = state((1, cmp(0, da, 0) if la == 1 else 1, 0 if db is None else cmp(0, db, 0), True))
        self.trans[start].append((_ZERO, _ZERO, zero))
        for d in range(1, 10):
            key = (1, cmp(d, da, 0) if la >= 1 else 1, 0 if db is None else cmp(d, db, 0), False)
            if db is not None and lb == 1 and key[2] > 0:
                continue                                     # one digit past a one-digit upper bound
            self.trans[start].append((_ZERO + d, _ZERO + d, state(key)))
        while todo:
            key = todo.pop()
            k, c_lo, c_hi, is_zero = key
            if is_zero or (lb is not None and k >= lb):
                continue                                     # no more integer digits
            here = index[key]
            for d in range(10):
                k2 = k + 1
                n_lo = (c_lo if c_lo != 0 else cmp(d, da, k)) if k2 <= la else 1
                n_hi = 0 if db is None else (c_hi if c_hi != 0 else cmp(d, db, k))
                if db is None and k2 > la:
                    k2 = la + 1                              # above the lower bound, no upper one: a loop
                if lb is not None and k2 == lb and n_hi > 0:
                    continue                                 # as many digits as the upper bound, above it
                self.trans[here].append((_ZERO + d, _ZERO + d, state((k2, n_lo, n_hi, False))))
        return any_final

    @staticmethod
    def relations(key: tuple, la: int, lb: int | None) -> tuple[int, int]:
        """How the integer digits read in state `key` compare with the lower and upper bound (-1, 0, 1) if
        they end there."""
        k, c_lo, c_hi, _ = key
        rel_lo = 1 if k > la else (c_lo if k == la else -1)
        rel_hi = -1 if lb is None or k < lb else (c_hi if k == lb else 1)
        return rel_lo, rel_hi

    def tail(self, rel_lo: int, rel_hi: int, a_incl: bool, b_incl: bool) -> str | None:
        """The fraction that may follow integer digits comparing so with the bounds (None: none, not even an
        empty one)."""
        if rel_lo < 0 or rel_hi > 0:
            return None
        low = _ANY if rel_lo > 0 or a_incl else _NONZERO
        high = _ANY if rel_hi < 0 else (_ZEROS if b_incl else None)
        if high is None or (low == _NONZERO and high == _ZEROS):
            return None
        out = high if low == _ANY else low
        if self.integers:
            return None if out == _NONZERO else _ZEROS       # an integer's only fraction is zeros
        return out

    def tail_state(self, tail: str) -> int:
        """The state after the '.' of a fraction of kind `tail`, shared by every state that allows it."""
        if tail in self.tails:
            return self.tails[tail]
        first = self.new()
        if tail == _ZEROS:
            loop = self.new(final=True)
            self.trans[first].append((_ZERO, _ZERO, loop))
            self.trans[loop].append((_ZERO, _ZERO, loop))
        elif tail == _ANY:
            loop = self.new(final=True)
            self.trans[first].append((_ZERO, _ZERO + 9, loop))
            self.trans[loop].append((_ZERO, _ZERO + 9, loop))
        else:                                                # zeros, then a non-zero digit, then any
            loop = self.new(final=True)
            self.trans[first] += [(_ZERO, _ZERO, first), (_ZERO + 1, _ZERO + 9, loop)]
            self.trans[loop].append((_ZERO, _ZERO + 9, loop))
        self.tails[tail] = first
        return first
