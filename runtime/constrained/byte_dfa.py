"""Byte-level DFA: the form every lexeme (regex, JSON string, number, literal, object key) takes at run time.

`table[state, byte]` is the next state or -1. Lowering a `CharFSM` to bytes encodes each character as UTF-8
(exact multi-byte handling, no overlongs or surrogates) and, in JSON-string mode, also accepts every JSON escape
of it (`\\n`, `\\u00e9`, surrogate pairs for astral characters), wrapped in the string's quotes. States from
which no accepting state can be reached are trimmed, so a live state always has a completion."""
from __future__ import annotations

import bisect
import hashlib
from typing import Hashable

import numpy as np

from .charfsm import CharFSM, Ranges

HEX = "0123456789abcdef"
_ESCAPES = {ord('"'): 0x22, ord("\\"): 0x5C, ord("/"): 0x2F, ord("b"): 8, ord("f"): 12, ord("n"): 10,
            ord("r"): 13, ord("t"): 9}
# UTF-8: lead byte -> (number of continuation bytes, lowest valid codepoint)
_MIN_CP = {1: 0x80, 2: 0x800, 3: 0x10000}


class ByteDFA:
    """Immutable byte automaton. `labels` names accepting states (object keys use it), `boundary` marks states
    where a JSON-string character begins (for counting characters)."""

    def __init__(self, table: np.ndarray, start: int, accepting: np.ndarray, labels: dict[int, Hashable],
                 boundary: np.ndarray):
        self.table = table                    # [n, 256] int32, -1 = dead
        self.start = start
        self.accepting = accepting            # [n] bool
        self.labels = labels
        self.boundary = boundary              # [n] bool
        self.num_states = table.shape[0]
        dead = self.num_states
        walk = np.concatenate([table, np.full((1, 256), -1, np.int32)])
        walk[walk < 0] = dead
        self.walk_table = walk                # [n + 1, 256], row n = dead sink
        self.walk_accepting = np.concatenate([accepting, [False]])
        self.walk_boundary = np.concatenate([boundary, [False]])
        h = hashlib.blake2b(table.tobytes(), digest_size=16)
        h.update(accepting.tobytes())
        h.update(np.int64(start).tobytes())
        self.key = h.hexdigest()              # structural identity: mask caches are shared between equal DFAs
        self.table_list = table.tolist()      # python rows for the byte-at-a-time stepper
        self._char_dist = None
        # optional: states [0, alias.num_states) behave exactly like the same states of `alias`, and other
        # states differ from `alias_ref` only on the bytes where their rows differ (see TokenIndex.classify)
        self.alias: "ByteDFA | None" = None
        self.alias_ref = -1
        self.accepting_list = accepting.tolist()
        self.boundary_list = boundary.tolist()
        self._live: dict[int, list[int]] = {}
        self._edges: tuple[np.ndarray, np.ndarray] | None = None
        self._walk_flat: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def walk_flat(self) -> tuple[np.ndarray, np.ndarray]:
        """For the vectorised trie walk: the walk table over states x = s + (n + 1) * a, where a records that
        the DFA was accepting before some byte after the first, flattened so x's row for byte b is at
        256 * x + b: (next x, int32 [2 (n + 1) 256]; characters started by that byte, uint8 same shape).
        Cached; grammars build it at compile time."""
        if self._walk_flat is None:
            big = self.num_states + 1
            nxt = np.empty((2, big, 256), np.int32)
            np.add(self.walk_table, (big * self.walk_accepting.astype(np.int32))[:, None], out=nxt[0])
            np.add(self.walk_table, np.int32(big), out=nxt[1])
            inc = np.zeros((2, big, 256), np.uint8)
            inc[:, self.walk_boundary] = np.arange(256) != 0x22
            self._walk_flat = (nxt.ravel(), inc.ravel())
        return self._walk_flat

    @property
    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct (src, dst) state pairs of `table` (see `distinct_edges`), cached."""
        if self._edges is None:
            self._edges = distinct_edges(self.table)
        return self._edges

    def live_bytes(self, s: int) -> list[int]:
        """Bytes state s can read (cached; the cache only grows)."""
        hit = self._live.get(s)
        if hit is None:
            hit = self._live[s] = [b for b, t in enumerate(self.table_list[s]) if t >= 0]
        return hit

    @property
    def char_dist(self) -> np.ndarray:
        """[n + 1] int64: fewest characters (counted as for maxLength) needed to reach acceptance from each
        state; the extra last entry (dead) is huge."""
        if self._char_dist is None:
            n = self.num_states
            big = 1 << 40
            dist = np.full(n + 1, big, np.int64)
            dist[:n][self.accepting] = 0
            src, byte = np.nonzero(self.table >= 0)
            dst = self.table[src, byte]
            w = (self.boundary[src] & (byte != 0x22)).astype(np.int64)
            while True:   # Bellman-Ford; weights are 0/1 and DFAs are small
                cand = np.full(n + 1, big, np.int64)
                np.minimum.at(cand, src, dist[dst] + w)
                new = np.minimum(dist, cand)
                if (new == dist).all():
                    break
                dist = new
            self._char_dist = dist
        return self._char_dist

    def is_empty(self) -> bool:
        """True when the automaton accepts nothing (after trimming, the start state is then a dead end)."""
        return not self.accepting[self.start] and bool((self.table[self.start] < 0).all())

    def match(self, data: bytes) -> bool:
        s = self.start
        for b in data:
            s = self.table_list[s][b]
            if s < 0:
                return False
        return self.accepting_list[s]

    @staticmethod
    def from_char_fsm(fsm: CharFSM, json_string: bool, canonical: bool = False,
                      limit: int = 200_000) -> "ByteDFA":
        """`canonical` (JSON strings only): no escapes for printable ASCII other than `"` and `\\` (what a
        generator should write; keeps forced text forced)."""
        return _Lowering(fsm, json_string, limit, canonical).build()

    @staticmethod
    def literal(words: list[bytes]) -> "ByteDFA":
        """Accepts exactly the given byte strings."""
        rows = [[-1] * 256]
        acc = [False]
        for w in words:
            s = 0
            for b in w:
                if rows[s][b] < 0:
                    rows.append([-1] * 256)
                    acc.append(False)
                    rows[s][b] = len(rows) - 1
                s = rows[s][b]
            acc[s] = True
        return _finish(rows, 0, acc, {}, [False] * len(rows))


def _finish(rows, start, acc, labels, boundary) -> ByteDFA:
    table = np.asarray(rows, dtype=np.int32).reshape(-1, 256)
    acc_a = np.array(acc, dtype=bool)
    # trim: keep only states that can reach an accepting state (backwards search over the distinct edges)
    src, dst = distinct_edges(table)
    live = acc_a.copy()
    if src.size < 50_000:
        into: list[list[int]] = [[] for _ in range(table.shape[0])]
        for a, b in zip(src.tolist(), dst.tolist()):
            into[b].append(a)
        todo = np.flatnonzero(acc_a).tolist()
        while todo:
            for a in into[todo.pop()]:
                if not live[a]:
                    live[a] = True
                    todo.append(a)
    else:
        while True:
            new = live.copy()
            np.logical_or.at(new, src, live[dst])
            if (new == live).all():
                break
            live = new
    table = np.where((table >= 0) & live[np.maximum(table, 0)], table, -1).astype(np.int32)
    keep = live[dst]             # a dead state has no edge into a live one, so these are the trimmed edges
    if not live[start]:
        table[:] = -1
        keep[:] = False
    dfa = ByteDFA(table, start, acc_a, labels, np.array(boundary, dtype=bool))
    dfa._edges = (src[keep], dst[keep])
    return dfa


def distinct_edges(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 [e] (src, dst) pairs with table[src, b] == dst for some byte b, each pair once, sorted by src."""
    n = table.shape[0]
    if n <= 2048:     # a dense [n, n + 1] adjacency (column n: dead) dedupes without sorting
        adj = np.zeros((n, n + 1), bool)
        adj[np.arange(n).repeat(256), table.ravel()] = True     # -1 lands in column n
        src, dst = np.nonzero(adj[:, :n])
        return src.astype(np.int64), dst.astype(np.int64)
    src, byte = np.nonzero(table >= 0)
    pair = np.unique(src.astype(np.int64) * n + table[src, byte])
    return pair // n, pair % n


class _Lowering:
    """CharFSM -> ByteDFA. Sub-automata for UTF-8 continuation bytes and \\uXXXX digits are memoised by what
    they map to, so "any character" tails are shared instead of copied per state."""

    def __init__(self, fsm: CharFSM, json_string: bool, limit: int, canonical: bool = False):
        self.fsm, self.json, self.limit, self.canonical = fsm, json_string, limit, canonical
        self.rows: list[list[int]] = []
        self.memo: dict[tuple, int] = {}

    def new(self) -> int:
        if len(self.rows) >= self.limit:
            raise OverflowError(f"automaton exceeds {self.limit} states")
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
            segs = [(a, b, main[t]) for a, b, t in fsm.trans[q]]
            row = self.rows[main[q]]
            for a, b, t in segs:
                if a >= 0x80:
                    break
                for c in range(a, min(b, 0x7F) + 1):
                    if not self.json or (c >= 0x20 and c not in (0x22, 0x5C)):
                        row[c] = t
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
        return _finish(self.rows, start, acc, labels, boundary)

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
        for d in range(radix):
            lo = base + d * size
            sub = _clip(segs, lo, lo + size - 1)
            if not sub:
                continue
            tgt = sub[0][2] if k == 1 else self._radix(sub, lo, k - 1, radix, byte0, digits)
            if digits is None:
                self.rows[s][byte0 + d] = tgt
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
