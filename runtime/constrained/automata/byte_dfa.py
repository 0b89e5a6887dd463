"""Byte-level DFA: the form every lexeme (regex, JSON string, number, literal, object key) takes at run time.

`table[state, byte]` is the next state or -1. Lowering a `CharFSM` to bytes encodes each character as UTF-8
(exact multi-byte handling, no overlongs or surrogates) and, in JSON-string mode, also accepts every JSON escape
of it (`\\n`, `\\u00e9`, surrogate pairs for astral characters), wrapped in the string's quotes. States from
which no accepting state can be reached are trimmed, so a live state always has a completion. (The lowering
itself is dfa_lowering.py.)

Counting: a lexeme with character bounds (LexNode.min_chars / max_chars) counts the transitions marked in
`count[state, byte]`, one each. For a JSON string they are the bytes that begin a character (a byte other than
the closing quote leaving a `boundary` state), derived from `boundary` when no table is given; a counted regex
repetition marks the bytes by which its loop reads a character (regex_counter.py). Every reader (the parser's
step, `char_dist`, `frozen`, the trie walks' `inc`) counts through this one table."""
from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Hashable

import numpy as np


class ByteDFA:
    """Immutable byte automaton. `labels` names accepting states (object keys use it), `boundary` marks states
    where a JSON-string character begins; `count` (bool [n, 256], optional) the counted transitions, by default
    those of a JSON string: boundary[s] and b != '"'."""

    def __init__(self, table: np.ndarray, start: int, accepting: np.ndarray, labels: dict[int, Hashable],
                 boundary: np.ndarray, count: np.ndarray | None = None):
        self.table = table                    # [n, 256] int32, -1 = dead; read-only (table_list copies rows lazily)
        table.flags.writeable = False
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
        if count is not None:
            count = count & (table >= 0)
            count.flags.writeable = False
        self._given_count = count
        h = hashlib.sha1(table.tobytes(), usedforsecurity=False)   # (SHA extensions: twice blake2b's speed)
        h.update(accepting.tobytes())
        h.update(np.int64(start).tobytes())
        # what is counted is part of the identity (token classes carry counts): the table, or what derives it
        h.update(np.packbits(count).tobytes() if count is not None else b"b" + boundary.tobytes())
        self.key = h.hexdigest()              # structural identity: mask caches are shared between equal DFAs
        self.table_list = _Rows(table)       # python rows for the byte-at-a-time stepper
        self._char_dist = None
        # optional: states [0, alias.num_states) behave exactly like the same states of `alias`, and other
        # states differ from `alias_ref` only on the bytes where their rows differ (see TokenIndex.classify)
        self.alias: "ByteDFA | None" = None
        self.alias_ref = -1
        self._live: dict[int, tuple[int, ...]] = {}
        self._edges: tuple[np.ndarray, np.ndarray] | None = None
        self._walk_flat: tuple[np.ndarray, np.ndarray] | None = None

    # Python forms for the byte-at-a-time stepper, made on first use
    @cached_property
    def accepting_list(self) -> list[bool]:
        return self.accepting.tolist()

    @cached_property
    def count(self) -> np.ndarray:
        """bool [n, 256], read-only: whether reading byte b in state s counts one character (module docstring)."""
        if self._given_count is not None:
            return self._given_count
        count = self.boundary[:, None] & (np.arange(256) != 0x22) & (self.table >= 0)
        count.flags.writeable = False
        return count

    @cached_property
    def count_rows(self) -> _Rows:
        """`count_rows[s][b]`: 1 where `count[s, b]`, else 0 (rows as bytes, made on first read)."""
        return _Rows(self.count, bytes)

    @cached_property
    def counts(self) -> bool:
        """Whether any transition counts (a regex without a counted repetition: none)."""
        return bool(self.count.any())

    @cached_property
    def frozen(self) -> np.ndarray:
        """bool [n + 1]: states from which no counted transition can be reached (the extra last entry, dead,
        too): there the count is final, so a lower bound on it must already hold. (A JSON string's are the states
        after its closing quote, and those where only the closing quote can come.)"""
        n = self.num_states
        live = np.zeros(n + 1, bool)
        live[:n] = self.count.any(axis=1)
        live[:n] = reaching(live[:n], *self.edges)
        return ~live

    @cached_property
    def frozen_list(self) -> list[bool]:
        return self.frozen.tolist()


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
            inc[:, :self.num_states] = self.count
            self._walk_flat = (nxt.ravel(), inc.ravel())
        return self._walk_flat

    @property
    def walk_loops(self) -> np.ndarray:
        """uint64 [n + 1, 4]: per state (and the dead row n, empty) the 256-bit set of bytes that lead back to the
        same state and count as `walk_loop_count[s]` says, for the compiled trie walk. Cached."""
        return self._self_loops[0]

    @property
    def walk_loop_count(self) -> np.ndarray:
        """bool [n + 1]: whether the bytes of `walk_loops[s]` count (all of them do, or none)."""
        return self._self_loops[1]

    @cached_property
    def _self_loops(self) -> tuple[np.ndarray, np.ndarray]:
        """(walk_loops, walk_loop_count), from one pass over the table's self-loops."""
        n = self.num_states
        loops = np.zeros((n + 1, 32), np.uint8)
        counted = np.zeros(n + 1, bool)
        if n:
            same = self.table == np.arange(n, dtype=np.int32)[:, None]
            counted[:n] = (same & self.count).any(axis=1)
            same &= self.count == counted[:n, None]
            loops[:n] = np.packbits(same, axis=1, bitorder="little")
        return loops.view(np.uint64), counted

    @property
    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct (src, dst) state pairs of `table` (see `distinct_edges`), cached."""
        if self._edges is None:
            self._edges = distinct_edges(self.table)
        return self._edges

    def live_bytes(self, s: int) -> tuple[int, ...]:
        """Bytes state s can read (cached; the cache only grows)."""
        hit = self._live.get(s)
        if hit is None:
            hit = self._live[s] = tuple(np.flatnonzero(self.table[s] >= 0).tolist())
        return hit

    @property
    def char_dist(self) -> np.ndarray:
        """[n + 1] int64: fewest counted transitions (`count`: characters, as for maxLength) needed to reach
        acceptance from each state; the extra last entry (dead) is huge."""
        if self._char_dist is None:
            n = self.num_states
            big = 1 << 40
            dist = np.full(n + 1, big, np.int64)
            dist[:n][self.accepting] = 0
            src, byte = np.nonzero(self.table >= 0)
            dst = self.table[src, byte]
            w = self.count[src, byte].astype(np.int64)
            while True:   # Bellman-Ford; weights are 0/1 and DFAs are small
                cand = np.full(n + 1, big, np.int64)
                np.minimum.at(cand, src, dist[dst] + w)
                new = np.minimum(dist, cand)
                if (new == dist).all():
                    break
                dist = new
            self._char_dist = dist
        return self._char_dist

    def nbytes(self) -> int:
        """What it holds, roughly: its [n, 256] table about five times over (the walk table, the flat walks, the
        rows), for the caches' byte counts."""
        return self.table.nbytes * 5

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
        return trimmed_dfa(rows, 0, acc, {}, [False] * len(rows))


class _Rows(dict):
    """`rows[state]`: the table's row as a tuple of ints, made the first time the stepper reads it. Tuples, which
    the garbage collector stops tracking once it has seen them (lists it would traverse in every full
    collection: ~100k rows in a server's cached grammars); one at a time, because converting every row was two
    thirds of building a key DFA (a 372-state one: 1.9 of 2.9 ms) and most of its states (the JSON escapes of
    each name's characters) are never stepped through. Converting all of them on first use instead moved those
    milliseconds into masks (MaskBench mask p99 1.03 -> 1.47 ms); a row costs about 3 us."""
    __slots__ = ("kind", "table")

    def __init__(self, table: np.ndarray, kind=None):
        super().__init__()
        self.table, self.kind = table, kind      # kind: bytes for a 0/1 row (count_rows), else tuples

    def __missing__(self, state: int) -> tuple[int, ...]:
        row = self[state] = tuple(self.table[state].tolist()) if self.kind is None else \
            self.table[state].astype(np.uint8).tobytes()
        return row


def trimmed_dfa(rows, start: int, acc, labels: dict[int, Hashable], boundary,
                count: np.ndarray | None = None) -> ByteDFA:
    """A ByteDFA from rows of 256 targets (-1: dead) and per-state accepting / boundary flags (and counted
    transitions, bool [n, 256], if not a JSON string's), with the states that cannot reach acceptance removed
    from the table (their rows and every edge into them set to -1)."""
    table = np.asarray(rows, dtype=np.int32).reshape(-1, 256)
    acc_a = np.array(acc, dtype=bool)
    # trim: keep only states that can reach an accepting state
    src, dst = distinct_edges(table)
    live = reaching(acc_a, src, dst)
    table = np.where((table >= 0) & live[np.maximum(table, 0)], table, -1).astype(np.int32)
    keep = live[dst]             # a dead state has no edge into a live one, so these are the trimmed edges
    if not live[start]:
        table[:] = -1
        keep[:] = False
    dfa = ByteDFA(table, start, acc_a, labels, np.array(boundary, dtype=bool), count)
    dfa._edges = (src[keep], dst[keep])
    return dfa


def reaching(seeds: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """bool [n]: the states from which a `seeds` state (bool [n]) can be reached over the edges src[i] -> dst[i]
    (seeds included): a backwards search, the edges into state b at into[at[b]:at[b + 1]] once sorted by target."""
    if not src.size:
        return seeds.copy()
    order = np.argsort(dst, kind="stable")
    into = src[order].tolist()
    at = np.searchsorted(dst[order], np.arange(seeds.size + 1)).tolist()
    seen = seeds.tolist()
    todo = np.flatnonzero(seeds).tolist()
    while todo:
        b = todo.pop()
        for a in into[at[b]:at[b + 1]]:
            if not seen[a]:
                seen[a] = True
                todo.append(a)
    return np.array(seen, bool)


def distinct_edges(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 [e] (src, dst) pairs with table[src, b] == dst for some byte b, each pair once, sorted by src."""
    n = table.shape[0]
    live = table >= 0
    if n > 2048 or np.count_nonzero(live) <= 4 * n:   # sparse rows (literals, closed name sets): sort the few
        src, byte = np.nonzero(live)
        pair = np.unique(src.astype(np.int64) * n + table[src, byte])
        return pair // n, pair % n
    # dense rows (strings): an [n, n + 1] adjacency (column n: dead) dedupes without sorting
    adj = np.zeros((n, n + 1), bool)
    adj[np.arange(n).repeat(256), table.ravel()] = True     # -1 lands in column n
    src, dst = np.nonzero(adj[:, :n])
    return src.astype(np.int64), dst.astype(np.int64)
