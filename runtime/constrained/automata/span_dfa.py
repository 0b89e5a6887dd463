"""The byte DFA of a JSON string holding a verbatim span of a source text, built straight from the text's suffix
automaton with array writes: the same language as lowering `substring_fsm(text)` (dfa_lowering.py), without
its per-state range clipping and memo lookups, so a 10k-token document compiles in a fraction of a second.

States: [0, n) the suffix automaton's (0 the empty prefix; each a character boundary, every one but 0 may end
the span), then the opening-quote start, the accepting state after the closing quote, and the inner states of
multi-byte characters and escapes, each a trie keyed by (suffix state, bytes read so far). Escapes: `\\"`,
`\\\\`, the short control escapes and `\\uXXXX` (either hex case) for BMP characters; `canonical` keeps them to
what a generator should write (quote, backslash, control and non-ASCII characters), otherwise every character's
escapes (and `\\/`) are accepted."""
from __future__ import annotations

import numpy as np

from .byte_dfa import ByteDFA

MAX_SPAN_CHARS = 48_000       # ~10k tokens of English prose in ~24k characters; ~1.6 byte-table rows each
_SHORT = {0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 8: ord("b"), 12: ord("f"), 10: ord("n"), 13: ord("r"), 9: ord("t")}
_HEX = [[ord(c)] if c.isdigit() else [ord(c), ord(c.upper())] for c in "0123456789abcdef"]


def suffix_automaton(text: str) -> list[dict[int, int]]:
    """The suffix automaton of `text` over codepoints: per state, codepoint -> state (state 0 the start; at
    most 2 len(text) - 1 states, built in one pass). Its words are exactly the substrings of `text`."""
    nxt: list[dict[int, int]] = [{}]
    link, length = [-1], [0]
    last = 0
    for ch in map(ord, text):
        cur = len(nxt)
        nxt.append({})
        link.append(-1)
        length.append(length[last] + 1)
        p = last
        while p != -1 and ch not in nxt[p]:
            nxt[p][ch] = cur
            p = link[p]
        if p == -1:
            link[cur] = 0
        else:
            q = nxt[p][ch]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(nxt)
                nxt.append(dict(nxt[q]))
                link.append(link[q])
                length.append(length[p] + 1)
                while p != -1 and nxt[p].get(ch) == q:
                    nxt[p][ch] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        last = cur
    return nxt


def span_dfa(text: str, canonical: bool, json_string: bool = True) -> ByteDFA:
    """ByteDFA of the JSON strings (quotes included) whose value is a non-empty substring of `text`; without
    `json_string`, of the substrings themselves as UTF-8 (free text: `gen(span_of=...)`). Raises ValueError for
    an empty text or one past MAX_SPAN_CHARS characters."""
    if not text.strip():
        raise ValueError("the source text is empty")
    if len(text) > MAX_SPAN_CHARS:
        raise ValueError(f"the source text has {len(text):,} characters, more than the {MAX_SPAN_CHARS:,} a span "
                         "constraint takes")
    nxt = suffix_automaton(text)
    n = len(nxt)
    start, final = (n, n + 1) if json_string else (0, -1)
    base = n + 2 if json_string else n     # the first inner state
    inner: dict[tuple, int] = {}       # (suffix state, bytes read) -> inner state
    # the edges src[i] --byte[i]--> dst[i]; a JSON string's first is its opening quote
    src, byte, dst = ([start], [0x22], [0]) if json_string else ([], [], [])

    def edge(p: int, path: tuple, b: int, q: int | None) -> int:
        """Add p --b--> q (q None: the inner state keyed by (p's key, path + b)); returns the target."""
        if q is None:
            key = path + (b,)
            q = inner.get(key)
            if q is None:
                q = inner[key] = base + len(inner)
        src.append(p)
        byte.append(b)
        dst.append(q)
        return q

    for p, row in enumerate(nxt):
        esc = None
        for cp, q in row.items():
            if cp < 0x80 and (not json_string or (cp >= 0x20 and cp not in (0x22, 0x5C))):
                edge(p, (), cp, q)
            elif 0xD800 <= cp <= 0xDFFF:
                continue                      # a lone surrogate: no UTF-8 and no escape spells it alone
            elif cp >= 0x80:                  # UTF-8: lead and continuation bytes, a trie per suffix state
                bs = chr(cp).encode()
                s, path = p, (p, "u8")
                for b in bs[:-1]:
                    s = edge(s, path, b, None)
                    path += (b,)
                edge(s, path, bs[-1], q)
            if not json_string:
                continue
            if canonical and 0x20 <= cp < 0x7F and cp not in (0x22, 0x5C):
                continue                      # printable ASCII is written as itself
            if esc is None:
                esc = edge(p, (p, "esc"), 0x5C, None)
            if cp in _SHORT and not (canonical and cp == 0x2F):
                edge(esc, (), _SHORT[cp], q)
            if cp <= 0xFFFF:
                s, path = edge(esc, (p, "esc"), ord("u"), None), (p, "esc", ord("u"))
                for i, d in enumerate(f"{cp:04x}"):
                    hd = int(d, 16)
                    t = edge(s, path, _HEX[hd][0], q if i == 3 else None)
                    for b in _HEX[hd][1:]:
                        edge(s, path, b, t)
                    s, path = t, path + (_HEX[hd][0],)
        if p and json_string:
            edge(p, (), 0x22, final)          # the closing quote
    size = base + len(inner)
    table = np.full((size, 256), -1, np.int32)
    table[np.array(src, np.int64), np.array(byte, np.int64)] = np.array(dst, np.int32)
    accepting = np.zeros(size, bool)
    if json_string:
        accepting[final] = True
    else:
        accepting[1:n] = True
    boundary = np.zeros(size, bool)
    boundary[:n] = True
    return ByteDFA(table, start, accepting, {final: True} if json_string else {}, boundary)
