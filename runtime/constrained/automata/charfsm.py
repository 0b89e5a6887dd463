"""Character-level finite automata: the common form that regexes, key sets and length counters compile to
before they are lowered to bytes (`dfa_lowering.lower_char_fsm`).

A state's transitions are sorted, disjoint codepoint ranges `(lo, hi, target)`, so "any character except a few"
stays three ranges instead of a million entries. Surrogates (U+D800..U+DFFF) never appear."""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Hashable

from ..budget import checkpoint

MAX_CP = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
ANY_CHAR: tuple[tuple[int, int], ...] = ((0, 0xD7FF), (0xE000, MAX_CP))

Ranges = tuple[tuple[int, int, int], ...]   # sorted disjoint (lo, hi, target)


@dataclass(frozen=True)
class CharFSM:
    """Deterministic automaton over Unicode codepoints. `finals` maps accepting states to a label. `counted`:
    the transitions (state, lo of the range) that count one character for a counter kept outside the automaton
    (regex_counter.py; the byte DFA counts them, see ByteDFA.count); the other operations on CharFSMs do not
    carry it, so only the counted regex path makes one."""
    initial: int
    trans: tuple[Ranges, ...]
    finals: dict[int, Hashable]
    counted: frozenset = frozenset()

    @property
    def num_states(self) -> int:
        return len(self.trans)

    def next(self, state: int, cp: int) -> int:
        rs = self.trans[state]
        i = bisect.bisect_right(rs, (cp, MAX_CP + 1, 0)) - 1
        if i >= 0 and rs[i][0] <= cp <= rs[i][1]:
            return rs[i][2]
        return -1

    def matches(self, text: str) -> bool:
        s = self.initial
        for ch in text:
            s = self.next(s, ord(ch))
            if s < 0:
                return False
        return s in self.finals


def complement(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Valid (non-surrogate) codepoints not covered by the given ranges."""
    out, lo = [], 0
    for a, b in sorted(points):
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= MAX_CP:
        out.append((lo, MAX_CP))
    return _minus_surrogates(out)


def _minus_surrogates(rs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for a, b in rs:
        if b < SURROGATES[0] or a > SURROGATES[1]:
            out.append((a, b))
            continue
        if a < SURROGATES[0]:
            out.append((a, SURROGATES[0] - 1))
        if b > SURROGATES[1]:
            out.append((SURROGATES[1] + 1, b))
    return out


def make_ranges(pairs: list[tuple[int, int, int]]) -> Ranges:
    """Sort and merge adjacent ranges with the same target."""
    out: list[list[int]] = []
    for a, b, t in sorted(pairs):
        if out and out[-1][2] == t and out[-1][1] + 1 == a:
            out[-1][1] = b
        else:
            out.append([a, b, t])
    return tuple((a, b, t) for a, b, t in out)


def points_to_ranges(cps: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for c in sorted(set(cps)):
        if out and out[-1][1] + 1 == c:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(a, b) for a, b in out]


def literal_trie(words: dict[str, Hashable], other: Hashable | None = None,
                 blocked: tuple[str, ...] = ()) -> CharFSM:
    """Accepts exactly the given words (each labelled); with `other`, also every string that is neither one of
    the words nor one of the `blocked` words (labelled `other`)."""
    children: list[dict[int, int]] = [{}]
    finals: dict[int, Hashable] = {}
    block_ends = set()
    for w, label in list(words.items()) + [(b, None) for b in blocked]:
        s = 0
        for ch in w:
            nxt = children[s].get(ord(ch))
            if nxt is None:
                children.append({})
                nxt = children[s][ord(ch)] = len(children) - 1
            s = nxt
        if label is None:
            block_ends.add(s)
        else:
            finals[s] = label
    trans: list[Ranges] = []
    anything = -1
    if other is not None:
        anything = len(children)   # absorbing "not one of the words" state
    for s, ch in enumerate(children):
        pairs = [(c, c, t) for c, t in ch.items()]
        if other is not None:
            pairs += [(a, b, anything) for a, b in complement([(c, c) for c in ch])]
        trans.append(make_ranges(pairs))
    if other is not None:
        trans.append(tuple((a, b, anything) for a, b in ANY_CHAR))
        finals[anything] = other
        for s in range(len(children)):
            if s not in block_ends:
                finals.setdefault(s, other)
    return CharFSM(0, tuple(trans), finals)


def with_length(fsm: CharFSM, min_len: int, max_len: int | None, limit: int) -> CharFSM:
    """Product of `fsm` with a character counter: accepts its words whose length is in [min_len, max_len].
    Counts saturate at max(min_len, ...) when max_len is None. Raises OverflowError past `limit` states."""
    cap = max_len if max_len is not None else min_len
    index: dict[tuple[int, int], int] = {}
    order: list[tuple[int, int]] = []

    def sid(s: int, n: int) -> int:
        key = (s, n)
        if key not in index:
            index[key] = len(order)
            order.append(key)
            if len(order) > limit:
                raise OverflowError
            if len(order) % 256 == 0:
                checkpoint(f"a length bound of {min_len}..{max_len} characters")
        return index[key]

    sid(fsm.initial, 0)
    trans: list[Ranges] = []
    i = 0
    while i < len(order):
        s, n = order[i]
        n2 = n + 1 if max_len is not None else min(n + 1, cap)
        if max_len is not None and n2 > max_len:
            trans.append(())
        else:
            trans.append(tuple((a, b, sid(t, n2)) for a, b, t in fsm.trans[s]))
        i += 1
    finals = {k: fsm.finals[s] for (s, n), k in index.items()
              if s in fsm.finals and n >= min_len and (max_len is None or n <= max_len)}
    return CharFSM(0, tuple(trans), finals)


def label_product(fsms: list[CharFSM], label, limit: int = 20_000) -> CharFSM:
    """Run several CharFSMs side by side (a component that dies stays dead, shown as -1; the first component
    dying kills the product). A product state is final iff `label(component states)` is not None."""
    start = tuple(f.initial for f in fsms)
    index = {start: 0}
    order = [start]
    trans = []
    i = 0
    while i < len(order):
        cur = order[i]
        points = set()
        for f, s in zip(fsms, cur):
            if s >= 0:
                for a, b, _ in f.trans[s]:
                    points.add(a)
                    points.add(b + 1)
        pts = sorted(points)
        out = []
        for a, nxt_pt in zip(pts, pts[1:]):
            tgt = tuple(f.next(s, a) if s >= 0 else -1 for f, s in zip(fsms, cur))
            if tgt[0] < 0:
                continue
            if tgt not in index:
                index[tgt] = len(order)
                order.append(tgt)
                if len(order) > limit:
                    raise OverflowError(f"product automaton exceeds {limit} states")
                if len(order) % 256 == 0:
                    checkpoint("a product of automata")
            out.append((a, nxt_pt - 1, index[tgt]))
        trans.append(make_ranges(out))
        i += 1
    finals = {}
    for st, k in index.items():
        lab = label(st)
        if lab is not None:
            finals[k] = lab
    return CharFSM(0, tuple(trans), finals)
