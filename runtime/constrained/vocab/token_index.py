"""The vocabulary as a byte trie, and every token's fate under a lexeme DFA.

`classify(dfa, state, node)` walks the DFA from `state` over the tokens below trie node `node` (their bytes past
the node's prefix) and sorts them into "stays inside the lexeme" (with the DFA state after the token) and "may
leave the lexeme" (the DFA accepts before the token ends; the caller checks the rest against the parse stack).
Three walks give the same answer: a vectorised one over the whole trie (one numpy gather per depth) for dense
lexeme states at the trie root; a frontier one (trie_frontier.py: gathers over just the nodes still inside the
lexeme, the small remainder handed to the depth-first one) for root states reading a few first bytes; and a
depth-first one that follows only the bytes the DFA can read, for small subtrees (below structural prefixes like
`{"`). Object-name DFAs built on the plain-string DFA reuse its root results (`split`, `packed_inside`).
Results are cached per (dfa.key, state, node), so equal DFAs in different grammars share the work.
`children` / `ends`: the trie as Python lists, for the parser's byte-by-byte walk at structural positions."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..automata.byte_dfa import ByteDFA
from .suffix_table import LEAVES, SuffixTable
from .trie_frontier import _spans
from .vocab_trie import VocabTrie

_CACHE_BYTES = 256 << 20    # classification cache budget
_PACKED_LIMIT = 4_096       # packed masks (6 KB each) kept before that cache is cleared
_DFS_NODES = 512            # a root walk whose first bytes cover more trie nodes than this is vectorised
_HANDOFF = 256             # a frontier whose subtrees hold this few nodes is finished depth-first
_DENSE_NODES = 20_000       # ... over the whole trie per depth (~10 ns a node) when the first bytes' subtrees
                            #   hold this many nodes, else over the frontier still inside the lexeme (~40 ns
                            #   a node it keeps alive)
_SUFFIX_DEPTHS = 24        # a SuffixTable covers tokens read from their first 24 byte offsets
_WS = b" \t\n\r"           # JSON whitespace
_FEW_DIFFER = 16           # an alias walk takes a node's children wholesale where its row differs on this few bytes
_CACHE_LIMIT_DIFFER = 65_536


class TokenClasses(NamedTuple):
    """How the tokens below one trie node fare from one DFA state (token bytes counted past the node)."""
    inside: np.ndarray      # int32 [k] ids of tokens the DFA reads wholly and stays alive
    inc: np.ndarray         # int32 [k] characters started along each (bytes leaving a boundary state, other than
                            #   the closing quote), for counted strings
    end: np.ndarray         # int32 [k] DFA state after each
    leaving: tuple          # ((a, rest, ((token, dc), ...)), ...): the lexeme may end in accepting state `a`
                            #   with `rest` of the token still to read, after `dc` characters

    def nbytes(self) -> int:
        return self.inside.nbytes * 3 + 64 * len(self.leaving)


class TokenIndex(VocabTrie):
    """Immutable view of a tokenizer's vocabulary (plus caches that only grow). One per tokenizer.

    Building one leaves process-wide state alone. It used to call gc.freeze(), against full collections
    traversing the trie; the trie now holds nothing the collector tracks (see VocabTrie: +14 tracked objects
    instead of +100k), and neither do the DFA rows the parser steps over (ByteDFA.table_list). Measured over
    150 MaskBench schemas with torch imported: one full collection (350-480 ms) without the freeze, five with it
    (0.8-1.3 s in all, what was created after the freeze); an engine run of 20 JSON schemas on the real model
    had one either way. Freezing a loaded model's objects (torch brings ~670k tracked objects, most of a full
    collection's time) is the embedding application's choice: `gc.freeze()` after loading."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self._cache: OrderedDict[tuple, TokenClasses] = OrderedDict()
        self._cache_bytes = 0
        self._ws: dict[int, tuple[int, ...]] = {}
        self._ws_step: dict[int, tuple[dict[int, tuple[int, ...]], tuple[int, ...]]] = {}
        self._packed: dict[tuple, np.ndarray] = {}
        self._split: dict[tuple, tuple] = {}
        self._suffix: dict[tuple, SuffixTable | None] = {}
        self._differs: dict[tuple, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def ws_closure(self, node: int) -> tuple[int, ...]:
        """Trie nodes reached from `node` by JSON whitespace bytes, `node` first. Cached."""
        hit = self._ws.get(node)
        if hit is None:
            out, i = [node], 0
            while i < len(out):
                kids = self.children[out[i]]
                out.extend(kids[b] for b in _WS if b in kids)
                i += 1
            hit = self._ws[node] = tuple(out)
        return hit

    def ws_step(self, node: int) -> tuple[dict[int, tuple[int, ...]], tuple[int, ...]]:
        """For the whitespace closure of `node` (`ws_closure`): (byte -> the children by that byte of the
        closure's nodes, `node`'s own first; the tokens ending inside the closure past `node`). What a walk at a
        structural position needs per byte, without looping over the closure each time. Cached."""
        hit = self._ws_step.get(node)
        if hit is None:
            bases = self.ws_closure(node)
            by_byte: dict[int, list[int]] = {}
            for n in bases:
                for b, c in self.children[n].items():
                    by_byte.setdefault(b, []).append(c)
            ends = tuple(t for w in bases[1:] for t in self.ends[w])
            hit = ({b: tuple(cs) for b, cs in by_byte.items()}, ends)
            with self._lock:
                self._ws_step[node] = hit
        return hit

    # --- classification ----------------------------------------------------------------------------------------
    def classify(self, dfa: ByteDFA, state: int, node: int = 0) -> TokenClasses:
        """The tokens below trie node `node` (whose prefix is already read), walked from DFA `state`. Cached.
        A DFA built on top of another (`dfa.alias`: same numbering for its first states) reuses the other's
        root results: wholly for those states, and for a state that differs from `dfa.alias_ref` only on a few
        first bytes, everything but those bytes' subtrees."""
        key = (dfa.key, state, node)
        hit = self._cache.get(key)
        if hit is not None:
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)      # least recently used goes first
            return hit
        alias = dfa.alias
        if node == 0 and alias is not None and state < alias.num_states:
            out = self.classify(alias, state)
        elif node == 0 and alias is not None:
            base, redo, part, _ = self.split(dfa, state)
            out = _merge(base, part, redo[self.token_first])
        else:
            out = self._walk(dfa, state, node, None)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = out
                self._cache_bytes += out.nbytes()
            while self._cache_bytes > _CACHE_BYTES and len(self._cache) > 1:
                self._cache_bytes -= self._cache.popitem(last=False)[1].nbytes()
        return out

    def split(self, dfa: ByteDFA, state: int) -> tuple[TokenClasses, np.ndarray, TokenClasses, np.ndarray]:
        """For a root state of a DFA built on `dfa.alias` (state >= alias.num_states): (base: the alias's classes
        from `alias_ref`; redo: bool [257] the first bytes where `state`'s row differs from alias_ref's; part:
        classes of just those first bytes' subtrees; packed int32 [words] of base.inside minus the redo first
        bytes). The tokens below `state` are base's outside redo plus part. Cached."""
        key = (dfa.key, state)
        hit = self._split.get(key)
        if hit is None:
            differ = np.nonzero(dfa.table[state] != dfa.table[dfa.alias_ref])[0]
            redo = np.zeros(257, bool)
            redo[differ] = True
            keep = self.packed_inside(dfa.alias, dfa.alias_ref) & ~np.bitwise_or.reduce(
                self.first_packed[differ], axis=0, initial=0)
            hit = (self.classify(dfa.alias, dfa.alias_ref), redo, self._alias_walk(dfa, state, differ.tolist()),
                   keep)
            with self._lock:
                if len(self._split) > _PACKED_LIMIT:
                    self._split.clear()
                self._split[key] = hit
        return hit

    def packed_inside(self, dfa: ByteDFA, state: int, node: int = 0) -> np.ndarray:
        """`classify(dfa, state, node).inside` as a packed int32 [words] mask. Cached."""
        key = (dfa.key, state, node)
        hit = self._packed.get(key)
        if hit is None:
            mask = np.zeros(self.words * 32, bool)
            mask[self.classify(dfa, state, node).inside] = True
            hit = np.packbits(mask, bitorder="little").view("<i4").astype(np.int32)
            with self._lock:
                if len(self._packed) > _PACKED_LIMIT:
                    self._packed.clear()
                self._packed[key] = hit
        return hit

    def suffix_table(self, dfa: ByteDFA, state: int) -> SuffixTable | None:
        """The SuffixTable of (dfa, state), built on first use (~0.1 s; ~10 MB); None if the DFA does not allow
        one (an accepting state that reads on). Cached per (dfa.key, state): one per plain-string DFA."""
        key = (dfa.key, state)
        if key not in self._suffix:
            try:
                table = SuffixTable(dfa, state, self.token_bytes, self.by_pre, _SUFFIX_DEPTHS)
            except ValueError:
                table = None
            with self._lock:
                self._suffix[key] = table
        return self._suffix[key]

    def _alias_walk(self, dfa: ByteDFA, state: int, first: list[int]) -> TokenClasses:
        """`_walk(dfa, state, 0, first)` for a state of a DFA built on `dfa.alias`: depth-first through the trie
        nodes where `dfa` is in its own states; where a byte takes it into an alias state exactly as the alias's
        `alias_ref` state would (a row copied from it), the child's whole subtree is read from the alias's
        SuffixTable (two slices), and elsewhere (escapes) the depth-first walk goes on."""
        alias, ref = dfa.alias, dfa.alias_ref
        table = self.suffix_table(alias, ref)
        if table is None or (dfa.table[dfa.accepting] >= 0).any():
            return self._walk(dfa, state, 0, first)
        rows, acc, bnd = dfa.table_list, dfa.accepting_list, dfa.boundary_list
        ref_row, ref_bnd, n_alias = alias.table_list[ref], alias.boundary_list[ref], alias.num_states
        children, ends, depth = self.children, self.ends, self.depth
        by_pre, tok_lo, tok_hi = self.by_pre, self.tok_lo, self.tok_hi
        ins: list[int] = []
        incs: list[int] = []
        outs: list[int] = []
        span_lo: list[int] = []         # subtrees read from the table: preorder slice, offset, characters before
        span_hi: list[int] = []
        span_p: list[int] = []
        span_c: list[int] = []
        leave: list[np.ndarray] = []
        rest: list[tuple] = []          # (trie node, state, characters, may end) for the depth-first walk
        rest_nodes = 0
        todo = [(0, state, 0, first)]
        while todo:
            n, s, c, only = todo.pop()
            kids = children[n]
            row = rows[s]
            c_in = c + 1 if bnd[s] else c
            p = depth[n]
            if only is not None:
                items = [(b, kids[b]) for b in only if b in kids]
            elif bnd[s] == ref_bnd and not acc[s] and p < table.depths and \
                    len(differ := self._differ(dfa, s)) <= _FEW_DIFFER:
                # every child by a byte where this row is ref's own reads like ref: those subtrees are the
                # slices of n's children's tokens between the other children's (children's slices are adjacent)
                items = sorted(((b, kids[b]) for b in differ if b in kids), key=lambda x: tok_lo[x[1]])
                lo = tok_lo[n] + len(ends[n])
                for _, child in items + [(None, None)]:
                    hi = tok_lo[child] if child is not None else tok_hi[n]
                    if hi > lo:
                        span_lo.append(lo)
                        span_hi.append(hi)
                        span_p.append(p)
                        span_c.append(c)
                    if child is not None:
                        lo = tok_hi[child]
            else:
                items = kids.items()
            for b, child in items:
                ns = row[b]
                if ns < 0:
                    if acc[s] and n != 0:       # the lexeme ended at n: every token below child leaves
                        leave.append(by_pre[tok_lo[child]:tok_hi[child]])
                    continue
                if ns < n_alias and ns == ref_row[b] and bnd[s] == ref_bnd and p < table.depths:
                    span_lo.append(tok_lo[child])
                    span_hi.append(tok_hi[child])
                    span_p.append(p)
                    span_c.append(c)
                    continue
                c2 = c_in if b != 0x22 else c
                for t in ends[child]:
                    ins.append(t)
                    incs.append(c2)
                    outs.append(ns)
                if children[child]:
                    if ns >= n_alias:
                        todo.append((child, ns, c2, None))
                    else:
                        rest.append((child, ns, c2, acc[ns]))
                        rest_nodes += self.subtree_size[child]
                        if rest_nodes > _DFS_NODES:     # inside an escape: the general walk does better
                            return self._walk(dfa, state, 0, first)
        if rest:
            i2, c2s, e2, l2 = self._dfs(dfa, rest, -1, None)
            ins += i2
            incs += c2s
            outs += e2
            if l2:
                leave.append(np.array(l2, np.int32))
        ids, inc, end = np.array(ins, np.int32), np.array(incs, np.int32), np.array(outs, np.int32)
        if span_lo:
            lo, hi = np.array(span_lo, np.int64), np.array(span_hi, np.int64)
            cnt = hi - lo
            pos = _spans(lo, hi)
            at = np.repeat(np.array(span_p, np.int64), cnt)
            t_end = table.end[at, pos]
            keep = t_end >= 0
            toks = by_pre[pos]
            ids = np.concatenate([ids, toks[keep]])
            inc = np.concatenate([inc, (table.inc[at, pos] + np.repeat(np.array(span_c, np.int32), cnt))[keep]])
            end = np.concatenate([end, t_end[keep]])
            gone = t_end == LEAVES
            if gone.any():
                leave.append(toks[gone])
        leaving = np.concatenate(leave).tolist() if leave else []
        return TokenClasses(ids, inc, end, self._leaving(dfa, state, 0, leaving))

    def _differ(self, dfa: ByteDFA, s: int) -> tuple[int, ...]:
        """Bytes where state s's row of `dfa` differs from `dfa.alias_ref`'s (a DFA built on `dfa.alias`). Cached."""
        key = (dfa.key, s)
        hit = self._differs.get(key)
        if hit is None:
            hit = tuple(np.flatnonzero(dfa.table[s] != dfa.table[dfa.alias_ref]).tolist())
            with self._lock:
                if len(self._differs) > _CACHE_LIMIT_DIFFER:
                    self._differs.clear()
                self._differs[key] = hit
        return hit

    def _walk(self, dfa: ByteDFA, state: int, node: int, only: list[int] | None) -> TokenClasses:
        """Classify from scratch; `only`: just the subtrees of these first bytes (the rest left out). Python
        costs ~1 µs a trie node; the per-depth walk ~0.5 ms for the whole trie; the frontier walk a few µs a
        depth plus the nodes kept alive: the first bytes' subtree sizes and count decide."""
        if node == 0:
            kids = self.children[0]
            first = [b for b in (dfa.live_bytes(state) if only is None else only) if b in kids]
            size = sum(self.subtree_size[kids[b]] for b in first)
        else:       # below a structural prefix subtrees are small: the depth-first walk is cheapest
            first, size = None, 0
        if size > _DFS_NODES:
            if node == 0 and only is None and size >= _DENSE_NODES:
                return self._walk_levels(dfa, state)
            ids, inc, end, leaving, rest = self.frontier.walk(dfa, state, node, first, _HANDOFF)
            leaving = leaving.tolist()
            if rest:        # a small remainder is finished depth-first (numpy's per-call cost dominates there)
                i2, c2, e2, l2 = self._dfs(dfa, rest, -1, None)
                ids, inc = np.concatenate([ids, np.array(i2, np.int32)]), np.concatenate([inc, np.array(c2, np.int32)])
                end = np.concatenate([end, np.array(e2, np.int32)])
                leaving += l2
            return TokenClasses(ids, inc, end, self._leaving(dfa, state, self.depth[node], leaving))
        return self._walk_dfs(dfa, state, node, only)

    def _walk_dfs(self, dfa: ByteDFA, state: int, node: int, only: list[int] | None) -> TokenClasses:
        """Depth-first over the trie below `node`, following only bytes the DFA reads, except below a point
        where the lexeme may end: there every child is looked at (a dead byte makes its subtree `leaving`)."""
        ins, incs, outs, leaving_ids = self._dfs(dfa, [(node, state, 0, False)], node, only)
        return TokenClasses(np.array(ins, np.int32), np.array(incs, np.int32), np.array(outs, np.int32),
                            self._leaving(dfa, state, self.depth[node], leaving_ids))

    def _dfs(self, dfa: ByteDFA, todo: list[tuple], node: int, only: list[int] | None):
        """The depth-first walk from `todo`: (trie node, DFA state, characters started, lexeme may end) entries
        whose children are to be classified; `only` restricts the children of `node`. Returns (inside ids,
        their characters, their end states, leaving ids) as lists."""
        rows, acc, bnd = dfa.table_list, dfa.accepting_list, dfa.boundary_list
        children, ends = self.children, self.ends
        ins: list[int] = []
        incs: list[int] = []
        outs: list[int] = []
        leave: list[np.ndarray] = []
        while todo:
            n, s, c, may_end = todo.pop()
            kids = children[n]
            row = rows[s]
            if n == node and only is not None:
                items = [(b, kids[b]) for b in only if b in kids]
            elif may_end:
                items = kids.items()
            else:
                live = dfa.live_bytes(s)
                items = kids.items() if len(kids) <= len(live) else [(b, kids[b]) for b in live if b in kids]
            c_in = c + 1 if bnd[s] else c
            for b, child in items:
                ns = row[b]
                if ns >= 0:
                    c2 = c_in if b != 0x22 else c
                    for t in ends[child]:
                        ins.append(t)
                        incs.append(c2)
                        outs.append(ns)
                    if children[child]:
                        todo.append((child, ns, c2, may_end or acc[ns]))
                elif may_end:
                    leave.append(self.by_pre[self.tok_lo[child]:self.tok_hi[child]])
        return ins, incs, outs, (np.concatenate(leave).tolist() if leave else [])

    def _walk_levels(self, dfa: ByteDFA, state: int) -> TokenClasses:
        """The vectorised walk from the trie root over every first byte: one gather per depth over the DFA's
        `walk_flat` table, whose states also carry "accepting before a later byte" (see ByteDFA)."""
        nxt, winc = dfa.walk_flat
        big = dfa.num_states + 1                          # x < big: not yet accepting before a later byte
        dead = dfa.num_states                             # x == dead: dead and never accepting: stop there
        st = np.full(self.num_nodes, dead, np.int32)      # walk state x per trie node (flat position)
        inc = np.zeros(self.num_nodes, np.int32)
        for d, (lo, hi, pp, bb) in enumerate(self.levels):
            if d == 0:      # parent: the root, in `state`; accepting before the first byte does not count
                st[lo:hi] = dfa.walk_table[state][bb]
                inc[lo:hi] = bool(dfa.walk_boundary[state]) & (bb != 0x22)
                continue
            ps = st[pp]
            if not (ps != dead).any():
                break
            at = ps * 256 + bb
            st[lo:hi] = nxt[at]
            inc[lo:hi] = inc[pp] + winc[at]
        toks, pos = self.by_pre, self.pre_pos
        x = st[pos]
        anc = x >= big
        tok_state = x - big * anc
        inside = tok_state != dead
        return TokenClasses(toks[inside], inc[pos[inside]], tok_state[inside],
                            self._leaving(dfa, state, 0, toks[anc & ~inside].tolist()))

    def _leaving(self, dfa: ByteDFA, state: int, depth: int, ids: list[int]) -> tuple:
        """Group tokens that may leave the lexeme by (accepting state, rest of the token)."""
        rows, accl, bl = dfa.table_list, dfa.accepting_list, dfa.boundary_list
        groups: dict[tuple[int, bytes], list[tuple[int, int]]] = {}
        for t in ids:
            data = self.token_bytes[t]
            s, c = state, 0
            for p in range(depth, len(data)):
                byte = data[p]
                if accl[s] and p > depth:
                    groups.setdefault((s, data[p:]), []).append((t, c))
                ns = rows[s][byte]
                if ns < 0:
                    break
                if bl[s] and byte != 0x22:
                    c += 1
                s = ns
        return tuple((a, rest, tuple(toks)) for (a, rest), toks in groups.items())


def _merge(base: TokenClasses, part: TokenClasses, redo: np.ndarray) -> TokenClasses:
    """`base` for tokens not in `redo` ([vocab] bool), `part` for those in it."""
    keep = ~redo[base.inside]
    leaving = tuple((a, rest, kept) for a, rest, toks in base.leaving
                    if (kept := tuple(x for x in toks if not redo[x[0]]))) + part.leaving
    return TokenClasses(np.concatenate([base.inside[keep], part.inside]), np.concatenate([base.inc[keep], part.inc]),
                        np.concatenate([base.end[keep], part.end]), leaving)
