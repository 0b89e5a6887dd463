"""The vocabulary trie in breadth-first order, for walks whose cost follows the nodes the DFA keeps alive.

Nodes are renumbered breadth-first with each node's children contiguous (`child_lo[i]:child_hi[i]`), so one
depth of a walk is a handful of numpy gathers over the frontier (the nodes still inside the lexeme) instead of
over the whole depth. Sparse lexeme states (digits, a few letters, formats) keep a frontier of tens of nodes where
the whole trie has 100k; dense ones (plain strings) are better served by the per-depth walk in TokenIndex."""
from __future__ import annotations

import numpy as np

from ..automata.byte_dfa import ByteDFA


def _spans(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of arange(lo[i], hi[i]) for every i (int64)."""
    cnt = hi - lo
    total = int(cnt.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    starts = np.cumsum(cnt) - cnt
    return np.arange(total, dtype=np.int64) + np.repeat(lo - starts, cnt)


class TrieFrontier:
    """Immutable breadth-first arrays of a token trie (`children`: list of {byte: node}, `ends`: token ids
    ending at each node, `by_pre`/`tok_lo`/`tok_hi`: the tokens below each node as one slice)."""

    def __init__(self, children, ends, by_pre: np.ndarray, tok_lo: list[int], tok_hi: list[int],
                 subtree_size: list[int]):
        order = [0]
        for n in order:                       # breadth-first: a parent's children are appended together
            order.extend(c for _, c in sorted(children[n].items()))
        n = len(order)
        bfs = np.empty(n, np.int64)
        bfs[order] = np.arange(n)
        nkids = np.array([len(children[x]) for x in order], np.int64)
        self.child_lo = 1 + np.cumsum(nkids) - nkids          # [n] by BFS id
        self.child_hi = self.child_lo + nkids
        byte = np.zeros(n, np.int64)
        for x in order:
            for b, c in children[x].items():
                byte[bfs[c]] = b
        self.byte = byte
        nends = np.array([len(ends[x]) for x in order], np.int64)
        self.end_lo = np.cumsum(nends) - nends
        self.end_hi = self.end_lo + nends
        self.end_tok = np.array([t for x in order for t in ends[x]], np.int32)
        self.sub_lo = np.asarray(tok_lo, np.int64)[order]       # tokens below: by_pre[sub_lo:sub_hi]
        self.sub_hi = np.asarray(tok_hi, np.int64)[order]
        self.by_pre = by_pre
        self.bfs = bfs                        # trie node -> BFS id
        self.order = np.asarray(order, np.int64)             # BFS id -> trie node
        self.size = np.asarray(subtree_size, np.int64)[order]  # nodes in each subtree, by BFS id

    def walk(self, dfa: ByteDFA, state: int, node: int, first: list[int] | None, handoff: int = 0):
        """From trie node `node` (its prefix read) in DFA `state`, over the subtrees of its children by the
        bytes `first` (None: all): (inside ids, their characters started, their end states, ids that may
        leave the lexeme, rest), the same sets as TokenIndex's other walks (order aside). Once the subtrees
        still to walk hold at most `handoff` nodes, it stops: `rest` lists their roots as (trie node, DFA
        state, characters started, lexeme may end) for the depth-first walk to classify their children.
        (Index arrays stay int64: numpy converts narrower fancy indices on every gather.)"""
        nxt, winc = dfa.walk_flat
        big = dfa.num_states + 1              # walk state x = s + big * (accepting before a later byte)
        dead = dfa.num_states
        v = self.bfs[node]
        nodes = np.arange(self.child_lo[v], self.child_hi[v])
        if first is not None:
            nodes = nodes[np.isin(self.byte[nodes], first)]
        bb = self.byte[nodes]
        x = dfa.walk_table[state][bb].astype(np.int64)        # accepting before the first byte does not count
        inc = (bool(dfa.walk_boundary[state]) & (bb != 0x22)).astype(np.int64)
        in_nodes, in_x, in_inc, out_nodes = [], [], [], []
        rest: list[tuple] = []
        while nodes.size:
            alive = (x != dead) & (x != dead + big)
            out_nodes.append(nodes[x == dead + big])          # dead after accepting: the whole subtree leaves
            nodes, x, inc = nodes[alive], x[alive], inc[alive]
            in_nodes.append(nodes)
            in_x.append(x)
            in_inc.append(inc)
            if int(self.size[nodes].sum()) <= handoff:
                s, a = x % big, x >= big
                may_end = (a | dfa.walk_accepting[s]).tolist()
                rest = list(zip(self.order[nodes].tolist(), s.tolist(), inc.tolist(), may_end))
                break
            lo, hi = self.child_lo[nodes], self.child_hi[nodes]
            cnt = hi - lo
            kids_at = _spans(lo, hi)
            if kids_at.size == 0:
                break
            at = np.repeat(x, cnt) * 256 + self.byte[kids_at]
            inc = np.repeat(inc, cnt) + winc[at]
            x = nxt[at].astype(np.int64)
            nodes = kids_at
        n_in = np.concatenate(in_nodes)
        x_in = np.concatenate(in_x)
        i_in = np.concatenate(in_inc)
        lo, hi = self.end_lo[n_in], self.end_hi[n_in]
        at = _spans(lo, hi)
        cnt = hi - lo
        st = np.repeat(x_in, cnt)
        ids = self.end_tok[at]
        out = np.concatenate(out_nodes)
        leaving = self.by_pre[_spans(self.sub_lo[out], self.sub_hi[out])]
        return ids, np.repeat(i_in, cnt).astype(np.int32), (st % big).astype(np.int32), leaving, rest
