"""Fast construction of JSON-string DFAs for sets of literal words (property names, string enums).

The general CharFSM lowering builds UTF-8 and \\uXXXX sub-automata per state, which is slow for tries with a
"any other string" fallback. Here every trie state starts as a copy of the plain-string automaton's row (or a
dead row when there is no fallback) and only the trie's own characters are overridden — including their
escaped spellings (`\\u0061` for `a`), whose hex digits fall back to the plain automaton's digits wherever they
leave the trie."""
from __future__ import annotations

from typing import Hashable, Optional

import numpy as np

from .byte_dfa import ByteDFA, trimmed_dfa
from .charfsm import ANY_CHAR, CharFSM
from .dfa_lowering import lower_char_fsm

_SIMPLE = {0x22: ord('"'), 0x5C: ord("\\"), 0x2F: ord("/"), 8: ord("b"), 12: ord("f"), 10: ord("n"),
           13: ord("r"), 9: ord("t")}


def _escaped_spellings(cp: int, canonical: bool) -> list[tuple[set, ...]]:
    """The spellings of character `cp` after a backslash, each a tuple of byte sets (hex digits in either
    case): `n` for a newline, `u000a`, and for a character past U+FFFF its UTF-16 surrogate pair
    `ud83d\\ude00` (what json.dumps writes). `canonical`: only the plainest spelling, and none for a
    character JSON lets a string hold as itself."""
    if canonical:
        if cp >= 0x20 and cp not in (0x22, 0x5C):
            return []
        if cp in _SIMPLE:
            return [({_SIMPLE[cp]},)]
        return [({ord("u")},) + tuple({ord(d)} for d in f"{cp:04x}")]
    out = [({_SIMPLE[cp]},)] if cp in _SIMPLE else []
    if cp <= 0xFFFF:
        units = [cp]
    else:
        units = [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
    spelling: tuple = ()
    for i, unit in enumerate(units):
        if i:
            spelling += ({0x5C},)
        spelling += ({ord("u")},) + tuple({ord(d), ord(d.upper())} for d in f"{unit:04x}")
    return out + [spelling]


def _plain(canonical: bool) -> ByteDFA:
    return lower_char_fsm(CharFSM(0, (tuple((a, b, 0) for a, b in ANY_CHAR),), {0: True}), True, canonical)


_PLAIN: dict[bool, ByteDFA] = {}


def words_dfa(words: dict[str, Hashable], other: Optional[Hashable], blocked: tuple[str, ...] = (),
              canonical: bool = False) -> ByteDFA:
    """JSON strings (with quotes) spelling one of `words` (labelled), or, with `other`, any other string except
    the `blocked` words (labelled `other`)."""
    if canonical not in _PLAIN:
        _PLAIN[canonical] = _plain(canonical)
    base = _PLAIN[canonical]
    t0 = base.table
    m0 = int(t0[base.start, 0x22])
    e0 = int(t0[m0, 0x5C])
    h0 = int(t0[e0, ord("u")]) if e0 >= 0 else -1
    rows: list[np.ndarray] = [r.copy() for r in t0]
    dead = np.full(256, -1, np.int32)

    def new(copy_of: int) -> int:
        rows.append(rows[copy_of].copy() if (other is not None and copy_of >= 0) else dead.copy())
        return len(rows) - 1

    # character trie
    children: list[dict[int, int]] = [{}]
    ends: dict[int, Optional[Hashable]] = {}
    for w, label in list(words.items()) + [(b, None) for b in blocked]:
        s = 0
        for ch in w:
            s = children[s].setdefault(ord(ch), len(children))
            if s == len(children):
                children.append({})
        if label is not None or s not in ends:
            ends[s] = label
    main = [new(m0) for _ in children]
    finals: dict[Hashable, int] = {}
    boundary = set(main)

    def final(label: Hashable) -> int:
        if label not in finals:
            finals[label] = len(rows)
            rows.append(dead.copy())
        return finals[label]

    for q, kids in enumerate(children):
        row = rows[main[q]]
        label = ends.get(q, other) if q in ends else other
        if label is not None and label is other:
            # the plain string's own end state, labelled `other` below: then the closing quote is no byte where
            # this row differs from the plain string's (TokenIndex.split redoes only those bytes' subtrees)
            row[0x22] = int(t0[m0, 0x22])
        else:
            row[0x22] = final(label) if label is not None else -1
        esc = new(e0)
        row[0x5C] = esc
        hexroot = None
        for cp, q2 in kids.items():
            tgt = main[q2]
            if cp < 0x80 and (cp >= 0x20 and cp not in (0x22, 0x5C)):
                row[cp] = tgt
            elif cp >= 0x80:
                enc = chr(cp).encode("utf-8")
                s, ref = main[q], m0
                for k, byte in enumerate(enc[:-1]):
                    ref = int(t0[ref, byte]) if ref >= 0 else -1
                    nxt = int(rows[s][byte])
                    if nxt < 0 or nxt < len(t0):      # not yet a private node: make one
                        nxt = new(ref)
                        rows[s][byte] = nxt
                    s = nxt
                rows[s][enc[-1]] = tgt
            for spelling in _escaped_spellings(cp, canonical):
                if spelling[0] != {ord("u")}:
                    rows[esc][min(spelling[0])] = tgt
                    continue
                if hexroot is None:
                    hexroot = new(h0)
                    rows[esc][ord("u")] = hexroot
                s, ref = hexroot, h0
                for k, variants in enumerate(spelling[1:]):
                    if k == len(spelling) - 2:
                        for v in variants:
                            rows[s][v] = tgt
                        break
                    b = min(variants)
                    ref = int(t0[ref, b]) if ref >= 0 else -1
                    nxt = int(rows[s][b])
                    if nxt < 0 or nxt < len(t0):      # not yet a private node: make one
                        nxt = new(ref)
                    for v in variants:
                        rows[s][v] = nxt
                    s = nxt
    start = len(rows)
    rows.append(dead.copy())
    rows[start][0x22] = main[0]
    acc = [False] * len(rows)
    labels = {}
    for label, s in finals.items():
        acc[s] = True
        labels[s] = label
    if other is not None:
        acc[int(t0[m0, 0x22])] = True
        labels[int(t0[m0, 0x22])] = other
    bnd = [False] * len(rows)
    for s in boundary | {m0}:
        bnd[s] = True
    dfa = trimmed_dfa(np.stack(rows), start, acc, labels, bnd)
    if other is not None and (dfa.table[:len(t0)] == t0).all():
        dfa.alias, dfa.alias_ref = base, m0     # trie states are the plain string's main state plus a few edges
    return dfa
