"""Compiled classification walk: one numba loop over the trie in preorder (PreorderTrie), from a DFA state,
skipping every subtree the DFA kills, for the walks too big for Python's depth-first one
(runtime/constrained/vocab/token_index.py).

It gives the same sets as that walk (order aside), at a few ns a scanned node; Python's walk costs ~1 µs a
live node and stays as the reference the tests compare with, and as the fallback where numba cannot be
imported. Compiled once and cached on disk (numba's `cache=True`); `warm()` loads it ahead of the first mask."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sglite.runtime.constrained.automata.byte_dfa import ByteDFA

try:
    import numba
except ImportError:          # a hard dependency, but Python's walk still works without it
    numba = None


def available() -> bool:
    """Whether the compiled walk can run (numba importable)."""
    return numba is not None


class PreorderTrie:
    """The trie's nodes in preorder (a node's subtree is the `size` positions from it on), as the compact arrays
    the compiled walk scans forward: a depth-first walk that skips a dead subtree by jumping past it reads memory
    in order. (Walking the breadth-first arrays depth-first instead costs a cache miss per array per node: ~35
    ns a node on Zen 1, no faster than the per-depth numpy walk.) Immutable."""

    def __init__(self, preorder: np.ndarray, depth: list[int], node_byte: np.ndarray, subtree_size: list[int],
                 tok_lo: list[int], token_len: np.ndarray):
        """`token_len`: int32 [tokens] byte length of each token in preorder (`by_pre`) order."""
        self.depth = np.asarray(depth, np.int16)[preorder]          # [n] by preorder position
        self.byte = node_byte[preorder].astype(np.uint8)            # [n] the byte into the node (root: 0)
        self.size = np.asarray(subtree_size, np.int32)[preorder]    # [n] nodes in the subtree, itself included
        # [n + 1]: the tokens ending at position i are by_pre[tok_lo[i]:tok_lo[i + 1]], those below it
        # by_pre[tok_lo[i]:tok_lo[i + size[i]]]
        self.tok_lo = np.append(np.asarray(tok_lo, np.int32)[preorder], np.int32(len(token_len)))
        self.token_len = np.asarray(token_len, np.int32)
        self.pos = np.empty(len(preorder), np.int64)               # node -> preorder position
        self.pos[preorder] = np.arange(len(preorder))
        self.max_depth = int(self.depth.max(initial=0))
        # uint64 [n, 4]: the bytes read anywhere strictly below each position, as a 256-bit set
        self.below = np.zeros((len(preorder), 4), np.uint64)
        if numba is not None:
            _below_bytes(self.depth, self.byte, self.below)


if numba is not None:
    @numba.njit(cache=True, nogil=True)
    def _below_bytes(depth, byte, below):
        """Fills below[i] (uint64 [n, 4]) with the set of bytes on edges strictly below preorder position i."""
        n = len(depth)
        parent = np.zeros(n, np.int64)
        path = np.zeros(int(depth.max()) + 2, np.int64)
        for i in range(1, n):
            path[depth[i]] = i
            parent[i] = path[depth[i] - 1]
        for i in range(n - 1, 0, -1):       # children come after their parent
            p = parent[i]
            b = byte[i]
            below[p, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
            for w in range(4):
                below[p, w] |= below[i, w]

    @numba.njit(cache=True, nogil=True)
    def _walk_kernel(depth, byte, size, tok_lo, by_pre, token_len, below, nxt, winc, loops, loop_count, accepting,
                     root_row, root_inc, p0, first, dead, max_depth, out_ids, out_inc, out_end, out_leave, out_at):
        """Scan the subtree of preorder position `p0` from the DFA row `root_row` (walk_table[state]: [256],
        `dead` = dead), over the children whose byte is set in `first` (bool [256]). A walk state x is a DFA
        state, plus big = dead + 1 once the DFA accepted before a byte past the first (walk_flat's encoding;
        `nxt`/`winc` are walk_flat; `root_inc` uint8 [256] the counts of `root_row`'s bytes). Where every byte
        below a node is one its state loops on (`loops`: uint64 [dead + 1, 4] byte sets, all counted or none),
        its whole subtree is read at once: each token inside, in that state, a character per byte where those
        loops count (`loop_count`). Fills out_ids /
        out_inc / out_end (tokens read wholly, DFA alive) and out_leave (tokens that may leave the lexeme: x
        past big with the DFA dead), returns (inside count, leaving count)."""
        big = dead + 1
        xs = np.empty(max_depth + 2, np.int64)         # walk state at each depth of the current path
        incs = np.empty(max_depth + 2, np.int64)
        path = np.empty(max_depth + 2, np.int64)       # preorder position at each depth of the current path
        accs = np.zeros(max_depth + 2, np.bool_)       # ... whether its DFA state is accepting
        cap = out_at.shape[0]
        n_at = 0
        d0 = depth[p0]
        n_in = 0
        n_out = 0
        i = p0 + 1
        hi = p0 + size[p0]
        while i < hi:
            d = depth[i] - d0
            b = byte[i]
            if d == 1:
                if not first[b]:
                    i += size[i]
                    continue
                x = np.int64(root_row[b])          # accepting before the first byte does not count
                inc = np.int64(root_inc[b])
            else:
                at = xs[d - 1] * 256 + b
                x = np.int64(nxt[at])
                inc = incs[d - 1] + winc[at]
            if x == dead:
                i += size[i]
                continue
            if x == dead + big:                    # dead after accepting: every token below leaves
                for k in range(tok_lo[i], tok_lo[i + size[i]]):
                    out_leave[n_out] = by_pre[k]
                    n_out += 1
                for dd in range(1, d):
                    if accs[dd]:
                        if n_at < cap:
                            out_at[n_at, 0] = path[dd]
                            out_at[n_at, 1] = tok_lo[i]
                            out_at[n_at, 2] = tok_lo[i + size[i]]
                        n_at += 1
                i += size[i]
                continue
            s = x - big if x >= big else x
            if size[i] > 1 and (below[i, 0] & ~loops[s, 0]) == 0 and (below[i, 1] & ~loops[s, 1]) == 0 and \
                    (below[i, 2] & ~loops[s, 2]) == 0 and (below[i, 3] & ~loops[s, 3]) == 0:
                per = np.int64(1) if loop_count[s] else np.int64(0)
                for k in range(tok_lo[i], tok_lo[i + size[i]]):
                    out_ids[n_in] = by_pre[k]
                    out_inc[n_in] = inc + (token_len[k] - depth[i]) * per
                    out_end[n_in] = s
                    n_in += 1
                i += size[i]
                continue
            for k in range(tok_lo[i], tok_lo[i + 1]):
                out_ids[n_in] = by_pre[k]
                out_inc[n_in] = inc
                out_end[n_in] = s
                n_in += 1
            xs[d] = x
            incs[d] = inc
            path[d] = i
            accs[d] = accepting[s]
            i += 1
        return n_in, n_out, n_at


if numba is not None:
    @numba.njit(cache=True, nogil=True)
    def _leave_kernel(ids, tok_off, tok_data, table, accepting, count, state, depth, out_t, out_p, out_a, out_c):
        """For each token of `ids`, read from byte `depth` on in DFA `state` (table: int32 [n, 256], -1 dead):
        every position p > depth where the DFA accepts before byte p, as a row (token, p, state there,
        characters counted before p: `count`, bool [n, 256]), until the DFA dies or the token ends. Returns the
        row count."""
        n = 0
        for t in ids:
            lo = tok_off[t]
            s = state
            c = 0
            for p in range(depth, tok_off[t + 1] - lo):
                b = tok_data[lo + p]
                if accepting[s] and p > depth:
                    out_t[n] = t
                    out_p[n] = p
                    out_a[n] = s
                    out_c[n] = c
                    n += 1
                ns = table[s, b]
                if ns < 0:
                    break
                if count[s, b]:
                    c += 1
                s = ns
        return n


def leave_rows(tok_off: np.ndarray, tok_data: np.ndarray, dfa: ByteDFA, state: int, depth: int, ids: np.ndarray
               ) -> tuple[list, list, list, list]:
    """(tokens, positions, accepting states, characters) as lists, one row per place each token of `ids` may
    end the lexeme (see _leave_kernel): TokenIndex._leaving's walk, compiled."""
    ids = np.asarray(ids, np.int64)
    cap = int((tok_off[ids + 1] - tok_off[ids]).sum())
    out = [np.empty(cap, np.int64) for _ in range(4)]
    n = _leave_kernel(ids, tok_off, tok_data, dfa.table, dfa.accepting, dfa.count, state, depth, *out)
    return tuple(o[:n].tolist() for o in out)


def compiled_walk(trie: PreorderTrie, by_pre: np.ndarray, dfa: ByteDFA, state: int, node: int, first,
                  bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(inside ids, their characters started, their end states, leaving ids; int32 each; rows) for the tokens
    below trie node `node` (its prefix read) from DFA `state`, over its children by the bytes in `first` (an
    iterable; None: all): the sets TokenIndex._walk_dfs gives. `bound`: at least the number of tokens below
    those children. `rows`: int64 [k, 3] (preorder position of an accepting node, lo, hi): the tokens
    by_pre[lo:hi] may leave the lexeme at that node (see _walk_kernel), every such pair."""
    nxt, winc = dfa.walk_flat
    mask = np.zeros(256, np.bool_)
    if first is None:
        mask[:] = True
    else:
        mask[np.fromiter(first, np.int64)] = True
    ids = np.empty(bound, np.int32)
    inc = np.empty(bound, np.int32)
    end = np.empty(bound, np.int32)
    leave = np.empty(bound, np.int32)
    cap = bound       # dead subtrees are disjoint and hold a token each: one row each unless accepting nests
    while True:
        at = np.empty((cap, 3), np.int64)
        n_in, n_out, n_at = _walk_kernel(
            trie.depth, trie.byte, trie.size, trie.tok_lo, by_pre, trie.token_len, trie.below, nxt, winc,
            dfa.walk_loops, dfa.walk_loop_count, dfa.walk_accepting, dfa.walk_table[state],
            winc[256 * state:256 * state + 256], trie.pos[node], mask, dfa.num_states, trie.max_depth, ids, inc, end,
            leave, at)
        if n_at <= cap:
            break
        cap = n_at
    return ids[:n_in].copy(), inc[:n_in].copy(), end[:n_in].copy(), leave[:n_out].copy(), at[:n_at].copy()


def warm(trie: PreorderTrie, by_pre: np.ndarray, tok_off: np.ndarray, tok_data: np.ndarray) -> None:
    """Loads (or on first use compiles) the kernels now, so that no mask pays for it: a few ms each from numba's
    disk cache, seconds to compile."""
    if numba is not None:
        # imported here, not at the top: the constrained package's __init__ imports the trie, which imports this
        from sglite.runtime.constrained.automata.byte_dfa import ByteDFA

        dfa = ByteDFA.literal([b"a"])
        compiled_walk(trie, by_pre, dfa, dfa.start, 0, None, len(by_pre))
        leave_rows(tok_off, tok_data, dfa, dfa.start, 0, [0])
