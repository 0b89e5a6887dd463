"""CharFSM -> ByteDFA: each character encoded as UTF-8 (exact multi-byte handling, no overlongs or surrogates)
and, in JSON-string mode, also every JSON escape of it (`\\n`, `\\u00e9`, surrogate pairs for astral
characters), wrapped in the string's quotes."""
from __future__ import annotations

import bisect
from typing import Hashable

import numpy as np

from ..budget import checkpoint
from .byte_dfa import ByteDFA, trimmed_dfa
from .charfsm import CharFSM

HEX = "0123456789abcdef"
_ESCAPES = {ord('"'): 0x22, ord("\\"): 0x5C, ord("/"): 0x2F, ord("b"): 8, ord("f"): 12, ord("n"): 10,
            ord("r"): 13, ord("t"): 9}
# UTF-8: lead byte -> (number of continuation bytes, lowest valid codepoint)
_MIN_CP = {1: 0x80, 2: 0x800, 3: 0x10000}


def lower_char_fsm(fsm: CharFSM, json_string: bool, canonical: bool = False, limit: int = 200_000) -> ByteDFA:
    """The byte DFA of `fsm`'s words (as JSON strings with quotes and escapes when `json_string`). `canonical`
    (JSON strings only): no escapes for printable ASCII other than `"` and `\\` (what a generator should write;
    keeps forced text forced). Raises OverflowError past `limit` states."""
    return Lowering(fsm, json_string, limit, canonical).build()


class Lowering:
    """CharFSM -> ByteDFA. Sub-automata for UTF-8 continuation bytes and \\uXXXX digits are memoised by what
    they map to, so "any character" tails are shared instead of copied per state."""

    def __init__(self, fsm: CharFSM, json_string: bool, limit: int, canonical: bool = False):
        if fsm.counted and json_string:
            raise ValueError("counted transitions are lowered for regexes, not JSON strings")
        self.fsm, self.json, self.limit, self.canonical = fsm, json_string, limit, canonical
        self.rows: list[list[int]] = []
        self.memo: dict[tuple, int] = {}
        # counted character transitions: their byte targets are written ~target until the byte that ends the
        # character, which counts (recorded here as (state, byte))
        self.counts: list[tuple[int, int]] = []

    def _set(self, state: int, byte: int, target: int) -> None:
        """rows[state][byte] = target, recording a count where `target` is a counted one (~t)."""
        if target < 0:
            target = ~target
            self.counts.append((state, byte))
        self.rows[state][byte] = target

    def new(self) -> int:
        if len(self.rows) >= self.limit:
            raise OverflowError(f"automaton exceeds {self.limit} states")
        if len(self.rows) % 256 == 0:
            checkpoint("a lexeme's byte automaton")
        self.rows.append([-1] * 256)
        return len(self.rows) - 1

    def build(self) -> ByteDFA:
        fsm = self.fsm
        n = fsm.num_states
        main = [self.new() for _ in range(n)]
        labels: dict[int, Hashable] = {}
        finals: dict[Hashable, int] = {}
        for q in range(n):
            # segments over codepoints, targets as byte states
            segs = [(a, b, ~main[t] if (q, a) in fsm.counted else main[t]) for a, b, t in fsm.trans[q]]
            for a, b, t in segs:
                if a >= 0x80:
                    break
                for c in range(a, min(b, 0x7F) + 1):
                    if not self.json or (c >= 0x20 and c not in (0x22, 0x5C)):
                        self._set(main[q], c, t)
            hi = [s for s in segs if s[1] >= 0x80]
            if hi:
                self._utf8_leads(main[q], hi)
            if self.json:
                if q in fsm.finals:
                    label = fsm.finals[q]
                    if label not in finals:
                        finals[label] = self.new()
                        labels[finals[label]] = label
                    self.rows[main[q]][0x22] = finals[label]
                self._escapes(main[q], q, segs)
        if self.json:
            start = self.new()
            self.rows[start][0x22] = main[fsm.initial]
            acc = [False] * len(self.rows)
            for s in labels:
                acc[s] = True
        else:
            start = main[fsm.initial]
            acc = [False] * len(self.rows)
            for q, label in fsm.finals.items():
                acc[main[q]] = True
                labels[main[q]] = label
        boundary = [False] * len(self.rows)
        for m in main:
            boundary[m] = True
        count = None
        if fsm.counted:
            count = np.zeros((len(self.rows), 256), bool)
            if self.counts:
                count[tuple(np.array(self.counts).T)] = True
        return trimmed_dfa(self.rows, start, acc, labels, boundary, count)

    # --- UTF-8 -----------------------------------------------------------------------------------------------
    def _utf8_leads(self, state: int, segs: list[tuple[int, int, int]]) -> None:
        row = self.rows[state]
        key = ("leads", tuple(segs))
        hit = self.memo.get(key)
        if hit is not None:
            for lead, t in hit:
                row[lead] = t
            return
        for lead in range(0xC2, 0xF5):
            if lead < 0xE0:
                k, base = 1, (lead - 0xC0) << 6
            elif lead < 0xF0:
                k, base = 2, (lead - 0xE0) << 12
            else:
                k, base = 3, (lead - 0xF0) << 18
            lo = max(base, _MIN_CP[k])
            hi = min(base + (1 << (6 * k)) - 1, 0x10FFFF)
            sub = _clip(segs, lo, hi)
            if sub:
                row[lead] = self._radix(sub, base, k, 64, 0x80, None)
        self.memo[key] = [(lead, row[lead]) for lead in range(0xC2, 0xF5) if row[lead] >= 0]

    def _radix(self, segs, base: int, k: int, radix: int, byte0: int, digits) -> int:
        """State consuming k more digits (UTF-8 continuation bytes, or hex digits when `digits` is given)
        that spell a codepoint in [base, base + radix**k); segs map codepoints to byte-state targets."""
        key = (radix, k, tuple((a - base, b - base, t) for a, b, t in segs))
        if key in self.memo:
            return self.memo[key]
        s = self.new()
        self.memo[key] = s
        size = radix ** (k - 1)
        # digits outside the span of segs (sorted, non-empty) would clip to nothing
        for d in range((segs[0][0] - base) // size, (segs[-1][1] - base) // size + 1):
            lo = base + d * size
            sub = _clip(segs, lo, lo + size - 1)
            if not sub:
                continue
            tgt = sub[0][2] if k == 1 else self._radix(sub, lo, k - 1, radix, byte0, digits)
            if digits is None:
                self._set(s, byte0 + d, tgt)
            else:
                for byte in digits[d]:
                    self.rows[s][byte] = tgt
        return s

    # --- JSON escapes ----------------------------------------------------------------------------------------
    def _escapes(self, state: int, q: int, segs: list[tuple[int, int, int]]) -> None:
        if self.canonical:   # printable ASCII except '"' and '\\' is written as itself
            segs = [s for s in _clip(segs, 0, 0x1F) + _clip(segs, 0x22, 0x22) + _clip(segs, 0x5C, 0x5C) +
                    _clip(segs, 0x7F, 0x10FFFF)]
        key = ("esc", tuple(segs))
        esc = self.memo.get(key)
        if esc is not None:        # same escape targets as another state: share its sub-automaton
            self.rows[state][0x5C] = esc
            return
        esc = self.memo[key] = self.new()
        self.rows[state][0x5C] = esc
        for byte, cp in _ESCAPES.items():
            t = _lookup(segs, cp)
            if t >= 0:
                self.rows[esc][byte] = t
        hexd = [[ord(c)] if c.isdigit() else [ord(c), ord(c.upper())] for c in HEX]
        bmp = _clip(segs, 0, 0xFFFF)
        astral = _clip(segs, 0x10000, 0x10FFFF)
        if len(astral) == 1 and astral[0][:2] == (0x10000, 0x10FFFF):
            # every astral char goes to one target: accept any valid surrogate pair
            low = self._radix([(0xDC00, 0xDFFF, astral[0][2])], 0, 4, 16, 0, hexd)
            u = self.new()
            self.rows[u][ord("u")] = low
            bs = self.new()
            self.rows[bs][0x5C] = u
            bmp = sorted(bmp + [(0xD800, 0xDBFF, bs)])
        if bmp:
            self.rows[esc][ord("u")] = self._radix(bmp, 0, 4, 16, 0, hexd)


def _clip(segs, lo: int, hi: int) -> list[tuple[int, int, int]]:
    out = []
    i = bisect.bisect_left(segs, (lo, -1, -1)) - 1
    for a, b, t in segs[max(i, 0):]:
        if a > hi:
            break
        if b < lo:
            continue
        out.append((max(a, lo), min(b, hi), t))
    return out


def _lookup(segs, cp: int) -> int:
    for a, b, t in segs:
        if a <= cp <= b:
            return t
    return -1
