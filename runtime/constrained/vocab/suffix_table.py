"""Every token's fate under one DFA state read from each of its first byte offsets, for splicing whole subtrees
into a walk.

Object-name DFAs are built on the plain-string DFA (`ByteDFA.alias`): once a token leaves the names' own states,
the rest of it is read by the plain string's main state, the same in every object of every grammar. A
`SuffixTable` holds, for that state and each offset p < `depths`, what reading every token from byte p on gives
(its end state, or dead, or "the lexeme ended part-way"), by preorder position, so a subtree's tokens are one
slice (`VocabTrie.by_pre[tok_lo[n]:tok_hi[n]]`) and a name DFA's walk only steps through its own few trie
nodes (TokenIndex.split)."""
from __future__ import annotations

import numpy as np

from ..automata.byte_dfa import ByteDFA

DEAD = -1       # `end` value: the DFA dies inside the token
LEAVES = -2     # `end` value: the DFA accepts before a later byte and then dies (the lexeme may end part-way)


class SuffixTable:
    """Immutable. `end[p, i]`: the DFA state after reading token `by_pre[i]` from byte p on, starting in
    `state` (or DEAD / LEAVES); `inc[p, i]`: the characters started along it (as TokenIndex counts them). Only
    entries for tokens longer than p mean anything. Requires every accepting state of `dfa` to read nothing
    (true of JSON strings: a closing quote ends them), so a token that reaches one before its end leaves."""

    def __init__(self, dfa: ByteDFA, state: int, token_bytes: list[bytes], by_pre: np.ndarray, depths: int):
        if (dfa.table[dfa.accepting] >= 0).any():
            raise ValueError("SuffixTable needs a DFA whose accepting states read nothing")
        self.dfa_key, self.state, self.depths = dfa.key, state, depths
        data = [token_bytes[t] for t in by_pre.tolist()]
        lens = np.array([len(d) for d in data], np.int64)
        n, width = len(data), int(lens.max(initial=1))
        flat = np.frombuffer(b"".join(data), np.uint8)
        starts = np.cumsum(lens) - lens
        grid = np.zeros((n, width), np.int64)                     # [tokens, bytes], zero-padded
        grid[np.repeat(np.arange(n), lens), np.arange(flat.size) - np.repeat(starts, lens)] = flat
        table, acc = dfa.table, dfa.accepting
        counts = dfa.boundary[:, None] & (np.arange(256) != 0x22)[None, :]    # [states, 256]: starts a character
        self.end = np.full((depths, n), DEAD, np.int32)
        self.inc = np.zeros((depths, n), np.int32)
        for p in range(depths):
            ids = np.flatnonzero(lens > p)
            s = np.full(ids.size, state, np.int64)
            c = np.zeros(ids.size, np.int32)
            k = p
            while ids.size:
                done = lens[ids] == k                           # read wholly and alive: inside
                self.end[p, ids[done]] = s[done]
                self.inc[p, ids[done]] = c[done]
                ids, s, c = ids[~done], s[~done], c[~done]
                if k > p:
                    left = acc[s]                               # accepting before byte k: the lexeme ends here
                    self.end[p, ids[left]] = LEAVES
                    ids, s, c = ids[~left], s[~left], c[~left]
                if not ids.size:
                    break
                b = grid[ids, k]
                ns = table[s, b]
                c = c + counts[s, b]
                live = ns >= 0
                ids, s, c = ids[live], ns[live].astype(np.int64), c[live]
                k += 1
