"""Every spelling of a number with an exponent, from the automaton of its plain spellings.

JSON Schema compares numbers by value: `1.1e1` is a multiple of 0.1, `1e+16` is above a minimum of 0, `1e-07` is
not an integer. The number lowerings (bounds, multipleOf, `not integer`) build automata over plain spellings
(`-?(0|[1-9][0-9]*)(\\.[0-9]+)?`); `with_exponents` adds the spellings `M e X` accepted exactly when the plain
spelling of the value M * 10**X is, for the exponents X and mantissas M of a fixed window:

- near: X in [NEAR_MIN, NEAR_MAX] with any mantissa of at most INT_DIGITS integer digits (`1.1e1`, `12.5E-1`,
  `100e-2`, `0.05e+2`);
- far: X in [EXP_MIN, EXP_MAX] with a mantissa of one significant digit, `[0-9]` and only zeros after its point
  (`1e+16`, `5e-07`, `2.0E7`), or in scientific notation, one non-zero digit before the point: any digits after
  it when the value is below 1 (X < 0: `1.5e-05`, `2.345e-07`), at most SCI_DIGITS when it is whole
  (`1.25e+20`). What json.dumps writes for floats below 1e-4, and JavaScript down to 1e-20; json.dumps' large
  floats and JavaScript's up to 1e+21 with at most SCI_DIGITS digits after the point.

Every other exponent spelling is refused, whatever its value (`1.234e+20`, `1e+22`, `12.5e-7`): the matcher never
accepts a value it has not checked, and the window keeps the automaton small (the language of "value right for
some X" needs a state per place the point may move, for each digit position, so a wider window costs its
square). Below 1 the window is cheap: after "0." and the zeros the exponent calls for, the mantissa's digits feed
`plain` alike for every X, so the X that reach the same state travel together as one branch.

The automaton reads the mantissa once for every X at the same time (a subset construction over one branch per
X): a branch moves the decimal point X places as it reads, feeding the shifted digits to the plain automaton.
Moving right (X >= 0), it holds back the point until X more digits were read and pads with zeros at the end;
moving left (X < 0), it guesses where in the integer digits the point goes (or how many zeros come before them),
and the guess dies when the integer digits do not end exactly there. At `e` the live branches leave the set of
exponents the value is right for, and the exponent is read against that set. Branches that can no longer end
(more digits owed than the plain automaton can read) are dropped as they appear, which keeps bounded ranges
small; the result is minimized."""
from __future__ import annotations

import numpy as np

from ..budget import checkpoint
from .byte_dfa import ByteDFA, trimmed_dfa

EXP_MIN, EXP_MAX = -20, 21
NEAR_MIN, NEAR_MAX = -2, 2
INT_DIGITS = 3
SCI_DIGITS = 2       # the most digits after the point of a whole value in scientific notation (`1.25e+20`)
MAX_STATES = 20_000

_DIGITS = tuple(range(ord("0"), ord("9") + 1))
_DOT, _MINUS, _PLUS = ord("."), ord("-"), ord("+")
_EXP = (ord("e"), ord("E"))
_INF = 1 << 30


def with_exponents(plain: ByteDFA, lo: int = EXP_MIN, hi: int = EXP_MAX, near: tuple[int, int] = (NEAR_MIN, NEAR_MAX),
                   int_digits: int = INT_DIGITS) -> ByteDFA:
    """`plain` and the spellings `M e x` (e or E, x with an optional sign and leading zeros) whose value
    M * 10**x has a plain spelling `plain` accepts: x in `near` with at most `int_digits` integer digits in M,
    or x in [lo, hi] with one significant digit in M (see the module's docstring). `plain` must accept a value
    in all of its plain spellings or in none (1.5 and 1.50 alike). Raises OverflowError past MAX_STATES."""
    plain = _minimal(plain.table, plain.accepting_list, plain.start)     # fewer branches to tell apart
    rows_in, acc_in = plain.table_list, plain.accepting_list
    dead = -1

    def feed(p: int, text: bytes) -> int:
        for b in text:
            if p < 0:
                return dead
            p = rows_in[p][b]
        return p

    depth = _digit_depth(plain)
    # branches as tuples (kind, ...); p is a state of `plain`, -1 dead
    #   ("P", p)                 the plain spelling itself (also every exponent `plain` accepts on its own)
    #   ("B", p)                 before the mantissa's first digit (after an optional '-')
    #   ("I", p, zero, k)        k integer digits read, point not placed: every near x >= 0 (zero: "0")
    #   ("G", x, p, r)           near x < 0, the point already fed: exactly r more integer digits must come
    #   ("F", x, p, lead, c, need)  near x after the mantissa's '.': c >= 0 more digits before the point, -1
    #                            placed; lead: only zeros so far (not fed); need: no fraction digit yet
    #   ("Z", xs, stage)         the far spellings: one digit read (stage 0), then '.' (1), then zeros (2); the
    #                            value is that digit times 10**x whatever zeros follow, so the exponents xs it
    #                            is right for are known at once
    #   ("N", p, xs, stage)      the far spellings below 1 in scientific notation (`1.5e-05`): a non-zero digit,
    #                            then '.' (1) and fraction digits (2), fed after "0." and -x-1 zeros; the x < 0 that
    #                            lead to the same state p go together, as their futures are the same
    #   ("M", p, k, stage)       the far whole spellings in scientific notation (`1.25e+20`): the mantissa's digits
    #                            fed as integer digits, k after its '.', right for the x >= k whose x - k padding
    #                            zeros `plain` accepts
    #   ("E", (xs, most), stage, neg, v)  the exponent: stage 0 after 'e', 1 after its sign, 2 in its digits
    #                            (value v, at most `most`), right if +-v is in xs
    neg_xs = tuple(range(max(-near[0], 0), 0, -1))                   # near shifts n = -x for x < 0
    pos_xs = tuple(range(max(near[0], 0), near[1] + 1))
    width = int_digits

    def far(p: int, b: int) -> frozenset:
        """The x in [lo, hi] for which the digit b (after the sign state p) times 10**x is accepted."""
        d = bytes([b])
        xs = []
        for x in range(lo, hi + 1):
            text = (d + b"0" * x if b != _DIGITS[0] else d) if x >= 0 else b"0." + b"0" * (-x - 1) + d
            q = feed(p, text)
            if q >= 0 and acc_in[q]:
                xs.append(x)
        return frozenset(xs)

    def scientific(p: int, b: int) -> list:
        """The N and M branches after a non-zero first digit b of the mantissa (p: the state after the sign)."""
        out = []
        q = rows_in[p][b] if p >= 0 else -1
        if q >= 0 and hi >= 0:
            out.append(("M", q, 0, 0))
        by_state: dict[int, list[int]] = {}
        z = feed(p, b"0.")                    # after "0." and -x-1 zeros: x = -1, -2, ...
        for x in range(-1, lo - 1, -1):
            if z < 0:
                break
            q = rows_in[z][b]
            if q >= 0:
                by_state.setdefault(q, []).append(x)
            z = rows_in[z][_DIGITS[0]]
        out += [("N", q, frozenset(xs), 0) for q, xs in by_state.items()]
        return out

    def padded(q: int, k: int) -> frozenset:
        """The x in [k, hi] for which `plain` accepts x - k zeros after state q."""
        xs = []
        for x in range(k, hi + 1):
            if q < 0:
                break
            if acc_in[q]:
                xs.append(x)
            q = rows_in[q][_DIGITS[0]]
        return frozenset(xs)

    def live_g(x: int, p: int, r: int):
        return ("G", x, p, r) if p >= 0 and depth[p] >= r else None

    def guesses_after(p: int, k: int) -> list:
        """The k integer digits read so far end before the point: x = -n leaves exactly n more to read."""
        q = feed(p, b".")
        return [] if q < 0 else [g for n in neg_xs if n <= width - k and (g := live_g(-n, q, n))]

    def finish(x: int, p: int, lead: bool, pad: int) -> bool:
        """Whether the mantissa read so far, shifted for x with `pad` zeros owed, is a plain spelling accepted."""
        if not lead:
            p = feed(p, b"0" * pad)
        elif p >= 0:
            p = feed(p, b"0")
        return p >= 0 and acc_in[p]

    def step(t: tuple, b: int) -> list:
        kind = t[0]
        if kind == "P":
            q = rows_in[t[1]][b]
            return [("P", q)] if q >= 0 else []
        if kind == "B":
            p = t[1]
            if b == _MINUS:
                return [("B", q)] if p == plain.start and (q := rows_in[p][b]) >= 0 else []
            if b not in _DIGITS:
                return []
            xs = far(p, b)
            out = [("Z", xs, 0)] if xs else []
            if b != _DIGITS[0]:
                out += scientific(p, b)
            if b == _DIGITS[0]:
                out.append(("I", p, True, 1))                       # "0": fed later, if at all
            else:
                q = rows_in[p][b]
                if q >= 0:
                    out.append(("I", q, False, 1))
                    out += guesses_after(q, 1)
            for n in neg_xs:                                       # the point before the integer digits
                for z in range(max(n - width, 0), n):
                    q = feed(p, b"0." + b"0" * z + bytes([b]))
                    if (g := live_g(-n, q, n - z - 1)):
                        out.append(g)
            return out
        if kind == "I":
            _, p, zero, k = t
            if b in _DIGITS:
                if zero or k >= int_digits:
                    return []
                q = rows_in[p][b]
                return [("I", q, False, k + 1)] + guesses_after(q, k + 1) if q >= 0 else []
            if b == _DOT:
                return [("F", x, p, zero, x, True) for x in pos_xs if zero or depth[p] >= x]
            return []
        if kind == "G":
            _, x, p, r = t
            if b in _DIGITS:
                g = live_g(x, rows_in[p][b], r - 1) if r > 0 else None
                return [g] if g else []
            if b == _DOT and r == 0:
                return [("F", x, p, False, -1, True)]
            return []
        if kind == "F":
            _, x, p, lead, c, _need = t
            if b not in _DIGITS:
                return []
            if c > 0:
                if lead and b == _DIGITS[0]:
                    return [("F", x, p, True, c - 1, False)]
                q = rows_in[p][b]
                return [("F", x, q, False, c - 1, False)] if q >= 0 and depth[q] >= c - 1 else []
            q = feed(p, (b"0" if lead else b"") + b"." + bytes([b])) if c == 0 else rows_in[p][b]
            return [("F", x, q, False, -1, False)] if q >= 0 else []
        if kind == "Z":
            _, xs, stage = t
            if stage == 0:
                return [("Z", xs, 1)] if b == _DOT else []
            return [("Z", xs, 2)] if b == _DIGITS[0] else []
        if kind == "N" or kind == "M":
            if t[3] == 0:
                return [t[:3] + (1,)] if b == _DOT else []
            if b not in _DIGITS:
                return []
            q = rows_in[t[1]][b]
            if q < 0:
                return []
            if kind == "N":
                return [("N", q, t[2], 2)]
            return [("M", q, t[2] + 1, 2)] if t[2] < min(hi, SCI_DIGITS) else []
        # "E"
        _, xs, stage, neg, v = t
        if stage == 0 and b in (_PLUS, _MINUS):
            return [("E", xs, 1, b == _MINUS, 0)]
        if b not in _DIGITS:
            return []
        v = 10 * v + b - _DIGITS[0]
        if v > xs[1]:
            return []
        return [("E", xs, 2, neg, v)]

    def exponents(t: tuple) -> frozenset:
        """The exponent values x for which the mantissa read so far (on branch t) is right."""
        kind = t[0]
        if kind == "I":
            return frozenset(x for x in pos_xs if finish(x, t[1], t[2], x))
        if kind == "G":
            return frozenset([t[1]]) if t[3] == 0 and acc_in[t[2]] else frozenset()
        if kind == "F":
            _, x, p, lead, c, need = t
            return frozenset([x]) if not need and finish(x, p, lead, max(c, 0)) else frozenset()
        if kind == "Z":
            return t[1] if t[2] != 1 else frozenset()
        if kind == "N":
            return t[2] if t[3] != 1 and acc_in[t[1]] else frozenset()
        if kind == "M":
            return padded(t[1], t[2]) if t[3] != 1 else frozenset()
        return frozenset()

    def moves(t: tuple) -> tuple[dict, frozenset]:
        """Branch t's successors by byte, and the exponents it ends right for."""
        out = {}
        for b in _bytes_of(t):
            got = step(t, b)
            if got:
                out[b] = got
        return out, exponents(t)

    def accepting(state: frozenset) -> bool:
        for t in state:
            if t[0] == "P" and acc_in[t[1]]:
                return True
            if t[0] == "E" and t[2] == 2 and (-t[4] if t[3] else t[4]) in t[1][0]:
                return True
        return False

    memo: dict[tuple, tuple] = {}
    after_e: dict[frozenset, tuple] = {}
    start = frozenset([("P", plain.start), ("B", plain.start)]) if not plain.is_empty() else frozenset()
    index = {start: 0}
    order = [start]
    src: list[int] = []
    byte: list[int] = []
    dst: list[int] = []
    acc: list[bool] = []
    i = 0
    while i < len(order):
        if i % 64 == 0:
            checkpoint("a number's exponent spellings")
        state = order[i]
        i += 1
        by_byte: dict[int, list] = {}
        xs = frozenset()
        for t in state:
            got = memo.get(t)
            if got is None:
                got = memo[t] = moves(t)
            for b, ts in got[0].items():
                if b in by_byte:
                    by_byte[b].extend(ts)
                else:
                    by_byte[b] = list(ts)
            xs |= got[1]
        if xs:
            e = after_e.get(xs)
            if e is None:
                e = after_e[xs] = ("E", (xs, max(abs(x) for x in xs)), 0, False, 0)
            for b in _EXP:
                by_byte.setdefault(b, []).append(e)
        for b, ts in by_byte.items():
            if not ts:
                continue
            nxt = frozenset(ts)
            j = index.get(nxt)
            if j is None:
                if len(order) >= MAX_STATES:
                    raise OverflowError(f"a number's exponent spellings pass {MAX_STATES} automaton states")
                j = index[nxt] = len(order)
                order.append(nxt)
            src.append(i - 1)
            byte.append(b)
            dst.append(j)
        acc.append(accepting(state))
    table = np.full((len(order), 256), -1, dtype=np.int32)
    table[src, byte] = dst
    return _minimal(table, acc)


def _minimal(table: np.ndarray, acc: list[bool], start: int = 0) -> ByteDFA:
    """The DFA with equivalent states merged (Moore's refinement: the subset construction above keeps apart
    branches that differ only in how they got there), trimmed."""
    used = np.nonzero((table >= 0).any(axis=0))[0]
    sub = table[:, used]
    cls = [int(a) for a in acc]
    count = len(set(cls))
    while True:
        ext = np.array(cls + [-1], dtype=np.int32)
        number: dict[tuple, int] = {}
        new = [number.setdefault((c,) + row, len(number))
               for c, row in zip(cls, map(tuple, ext[sub].tolist()))]
        done = len(number) == count
        cls, count = new, len(number)
        if done:
            break
    # one row per class, numbered in order of first appearance (the start state's class first)
    first_of: dict[int, int] = {}
    first: list[int] = []
    for state in [start] + list(range(len(cls))):
        c = cls[state]
        if c not in first_of:
            first_of[c] = len(first)
            first.append(state)
    renum = np.array([first_of[c] for c in cls] + [-1], dtype=np.int32)
    out = np.full((len(first), 256), -1, dtype=np.int32)
    out[:, used] = renum[sub[first]]
    return trimmed_dfa(out, 0, [acc[s] for s in first], {}, [False] * len(first))


_NUMBER_BYTES = _DIGITS + (_DOT, _MINUS, _PLUS) + _EXP
_MANTISSA_BYTES = _DIGITS + (_DOT, _MINUS)


def _bytes_of(t: tuple) -> tuple:
    """The bytes a branch may read (the 'e' that ends a mantissa is added for the whole state at once)."""
    if t[0] == "P":
        return _NUMBER_BYTES
    if t[0] == "E":
        return _DIGITS + (_PLUS, _MINUS) if t[2] == 0 else _DIGITS
    return _MANTISSA_BYTES


def _digit_depth(dfa: ByteDFA) -> list[int]:
    """Per state, the most digits it can read in a row (_INF when a digit loop is in reach): a branch that owes
    more digits than that can never end."""
    rows = dfa.table_list
    n = dfa.num_states
    succ = [[t for b in _DIGITS if (t := rows[s][b]) >= 0] for s in range(n)]
    depth = [-1] * n
    on_path = [False] * n
    for root in range(n):
        if depth[root] >= 0:
            continue
        stack = [(root, 0)]
        on_path[root] = True
        while stack:
            s, k = stack[-1]
            if k < len(succ[s]):
                stack[-1] = (s, k + 1)
                t = succ[s][k]
                if on_path[t]:
                    depth[t] = _INF                # a cycle: unbounded
                elif depth[t] < 0:
                    on_path[t] = True
                    stack.append((t, 0))
                continue
            stack.pop()
            on_path[s] = False
            if depth[s] != _INF:
                depth[s] = max([0] + [depth[t] + 1 if depth[t] != _INF else _INF for t in succ[s]])
    return [min(d, _INF) for d in depth]
