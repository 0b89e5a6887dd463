"""The vocabulary as a byte trie, and every token's fate under a lexeme DFA.

`classify(dfa, state, node)` walks the DFA from `state` over the tokens below trie node `node` (their bytes past
the node's prefix) and sorts them into "stays inside the lexeme" (with the DFA state after the token) and "may
leave the lexeme" (the DFA accepts before the token ends; the caller checks the rest against the parse stack).
Two walks give the same answer: a compiled scan of the trie in preorder that skips the subtrees the DFA
kills (kernels/trie_walk_cpu.py), and Python's depth-first one that follows only the bytes the DFA can read, for small
subtrees (below structural prefixes like `{"`) and as the reference. Object-name DFAs built on the plain-string
DFA reuse its root results (`split`, `packed_inside`): only the first bytes where a state differs are walked.
Results are cached per (dfa.key, state, node), so equal DFAs in different grammars share the work.
`children` / `ends`: the trie as Python lists, for the parser's byte-by-byte walk at structural positions."""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ...defaults import GRAMMAR_CACHE_BYTES
from ..automata.byte_dfa import ByteDFA
from ..cache import CacheBudget, LruCache
from sglite.kernels import trie_walk_cpu as trie_walk
from .vocab_trie import VocabTrie

_KERNEL_NODES = 64         # first bytes' subtrees past this many nodes are classified by the compiled scan
_KERNEL_LEAVING = 16       # leaving tokens past this many are walked by the compiled loop (kernels/trie_walk_cpu.py)
_WS = b" \t\n\r"           # JSON whitespace


class TokenClasses:
    """How the tokens below one trie node fare from one DFA state (token bytes counted past the node).
    Immutable once made. The tokens that may leave the lexeme are grouped on first read, two ways: `leaving`
    by rest (what JSON's masks use) and `leave_points` by the trie node where they leave (what a context-free
    grammar's masks use: most of its lexemes leave on thousands of tokens, a space then a word)."""
    __slots__ = ("inside", "inc", "end", "leave_ids", "_group", "_leaving", "_at", "_points")

    def __init__(self, inside: np.ndarray, inc: np.ndarray, end: np.ndarray, leave_ids: np.ndarray,
                 group: Callable[[], tuple], at: Callable[["TokenClasses"], tuple]):
        self.inside = inside        # int32 [k] ids of tokens the DFA reads wholly and stays alive
        self.inc = inc              # int32 [k] characters counted along each (ByteDFA.count), for counted lexemes
        self.end = end              # int32 [k] DFA state after each
        self.leave_ids = leave_ids  # int32 [j] ids of the tokens the lexeme may end inside of, the rest read on
        self._group = group         # () -> `leaving`
        self._leaving = None
        self._at = at               # (self) -> `leave_points`
        self._points = None

    @property
    def leaving(self) -> tuple:
        """((a, rest, ((token, dc), ...)), ...): the lexeme may end in accepting state `a` with `rest` of the
        token still to read, after `dc` characters. Grouped on first read."""
        out = self._leaving
        if out is None:
            out = self._leaving = self._group()
            self._group = None
        return out

    @property
    def leave_points(self) -> tuple:
        """((trie node m, int64 ids of the tokens that may end the lexeme right after m's prefix and go on),
        ...), each m once: `leaving` by where. Grouped on first read."""
        out = self._points
        if out is None:
            out = self._points = self._at(self)
            self._at = None
        return out

    def nbytes(self) -> int:
        return self.inside.nbytes * 3 + self.leave_ids.nbytes * 4


class TokenIndex(VocabTrie):
    """Immutable view of a tokenizer's vocabulary (plus its caches, charged to `budget`). One per tokenizer.

    Building one leaves process-wide state alone (no gc.freeze()): the trie holds nothing the garbage collector
    tracks (see VocabTrie: 14 tracked objects, not one per token), and neither do the DFA rows the parser steps
    over (ByteDFA.table_list), so full collections stay cheap without it. Freezing a loaded model's objects
    (torch brings ~670k tracked objects, most of a full collection's time) is the embedding application's
    choice: `gc.freeze()` after loading."""

    def __init__(self, tokenizer, caches: CacheBudget | None = None):
        """`caches`: the budget its caches are charged to (a compiler's; None: one of GRAMMAR_CACHE_BYTES of
        its own). Every grammar on this index charges its mask caches to the same budget (`budget`)."""
        super().__init__(tokenizer)
        self.budget = caches if caches is not None else CacheBudget(GRAMMAR_CACHE_BYTES)
        self._cache = LruCache(self.budget, "token classes")
        self._ws: dict[int, tuple[int, ...]] = {}
        self._ws_step: dict[int, tuple[dict[int, tuple[int, ...]], tuple[int, ...]]] = {}
        self._packed = LruCache(self.budget, "packed inside masks")
        self._split = LruCache(self.budget, "alias splits")
        self._derived: dict[str, LruCache] = {}
        self._lock = threading.Lock()
        trie_walk.warm(self.scan, self.by_pre, self.tok_off, self.tok_data)

    def derived_cache(self, name: str) -> LruCache:
        """A cache named `name`, made on first use, for results that follow from this index's classifications
        alone (keyed by DFA key, state, trie node...): one per index, so every grammar on this vocabulary
        shares them; charged to the index's budget."""
        hit = self._derived.get(name)
        if hit is None:
            with self._lock:
                hit = self._derived.setdefault(name, LruCache(self.budget, name))
        return hit

    def cache(self, name: str, **bounds) -> LruCache:
        """A new cache charged to this index's budget (a grammar's mask caches: cache.py's LruCache)."""
        return LruCache(self.budget, name, **bounds)

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
            return hit
        alias = dfa.alias
        if node == 0 and alias is not None and state < alias.num_states:
            out = self.classify(alias, state)
        elif node == 0 and alias is not None:
            base, redo, part, _ = self.split(dfa, state)
            out = _merge(base, part, redo[self.token_first], self._points_of)
        else:
            out = self._walk(dfa, state, node, None)
        return self._cache.put(key, out)

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
            hit = self._split.put(key, (self.classify(dfa.alias, dfa.alias_ref), redo,
                                        self._walk(dfa, state, 0, differ.tolist()), keep))
        return hit

    def packed_inside(self, dfa: ByteDFA, state: int, node: int = 0) -> np.ndarray:
        """`classify(dfa, state, node).inside` as a packed int32 [words] mask. Cached."""
        key = (dfa.key, state, node)
        hit = self._packed.get(key)
        if hit is None:
            mask = np.zeros(self.words * 32, bool)
            mask[self.classify(dfa, state, node).inside] = True
            hit = self._packed.put(key, np.packbits(mask, bitorder="little").view("<i4").astype(np.int32))
        return hit

    def leave_points(self, dfa: ByteDFA, state: int, node: int = 0) -> tuple[tuple[int, np.ndarray], ...]:
        """`classify(dfa, state, node).leave_points`."""
        return self.classify(dfa, state, node).leave_points

    def _rows_by_node(self, rows: np.ndarray) -> tuple[tuple[int, np.ndarray], ...]:
        """compiled_walk's (preorder position, lo, hi) rows as `TokenClasses.leave_points`."""
        if not len(rows):
            return ()
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        pos, lo, hi = rows[:, 0], rows[:, 1], rows[:, 2]
        cnt = hi - lo
        ends = np.cumsum(cnt)
        toks = self.by_pre[np.arange(int(ends[-1])) + np.repeat(lo - (ends - cnt), cnt)].astype(np.int64)
        starts = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])
        cuts = np.r_[0, ends[starts[1:] - 1], ends[-1]]
        nodes = self.preorder[pos[starts]].tolist()
        return tuple((m, toks[cuts[k]:cuts[k + 1]]) for k, m in enumerate(nodes))

    def _points_of(self, classes: TokenClasses) -> tuple[tuple[int, np.ndarray], ...]:
        """`classes.leave_points` from its `leaving` groups: each token walked down to its leave node."""
        tb, children = self.token_bytes, self.children
        groups: dict[int, list[int]] = {}
        for _, rest, toks in classes.leaving:
            for tok, _ in toks:
                data = tb[tok]
                m = 0
                for b in data[:len(data) - len(rest)]:
                    m = children[m][b]
                groups.setdefault(m, []).append(tok)
        return tuple((m, np.array(g, np.int64)) for m, g in groups.items())

    def _walk(self, dfa: ByteDFA, state: int, node: int, only: list[int] | None) -> TokenClasses:
        """Classify from scratch; `only`: just the subtrees of these first bytes (the rest left out). Python's
        depth-first walk costs ~1 µs a live trie node, the compiled scan (kernels/trie_walk_cpu.py) ~10 µs a call plus
        a few ns a node of the subtrees it scans: their size decides (without numba, Python walks them all)."""
        kids = self.children[node]
        first = [b for b in (dfa.live_bytes(state) if only is None else only) if b in kids]
        if trie_walk.available() and sum(self.subtree_size[kids[b]] for b in first) > _KERNEL_NODES:
            bound = sum(self.tok_hi[kids[b]] - self.tok_lo[kids[b]] for b in first)
            ids, inc, end, leaving, rows = trie_walk.compiled_walk(self.scan, self.by_pre, dfa, state, node, first,
                                                                  bound)
            return self._classes(dfa, state, node, ids, inc, end, leaving, rows)
        return self._walk_dfs(dfa, state, node, only)

    def _walk_dfs(self, dfa: ByteDFA, state: int, node: int, only: list[int] | None) -> TokenClasses:
        """Depth-first over the trie below `node`, following only bytes the DFA reads, except below a point
        where the lexeme may end: there every child is looked at (a dead byte makes its subtree `leaving`)."""
        ins, incs, outs, leaving_ids = self._dfs(dfa, [(node, state, 0, False)], node, only)
        return self._classes(dfa, state, node, np.array(ins, np.int32), np.array(incs, np.int32),
                             np.array(outs, np.int32), np.array(leaving_ids, np.int32))

    def _classes(self, dfa: ByteDFA, state: int, node: int, ids, inc, end, leave_ids, rows=None) -> TokenClasses:
        """TokenClasses whose leaving groups are made on first read: by node from the compiled scan's `rows`
        where it gave them, else from the groups by rest."""
        depth = self.depth[node]
        return TokenClasses(ids, inc, end, leave_ids, lambda: self._leaving(dfa, state, depth, leave_ids.tolist()),
                            self._points_of if rows is None else lambda _: self._rows_by_node(rows))

    def _dfs(self, dfa: ByteDFA, todo: list[tuple], node: int, only: list[int] | None):
        """The depth-first walk from `todo`: (trie node, DFA state, characters started, lexeme may end) entries
        whose children are to be classified; `only` restricts the children of `node`. Returns (inside ids,
        their characters, their end states, leaving ids) as lists."""
        rows, acc, cnt = dfa.table_list, dfa.accepting_list, dfa.count_rows
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
            crow = cnt[s]
            for b, child in items:
                ns = row[b]
                if ns >= 0:
                    c2 = c + crow[b]
                    for t in ends[child]:
                        ins.append(t)
                        incs.append(c2)
                        outs.append(ns)
                    if children[child]:
                        todo.append((child, ns, c2, may_end or acc[ns]))
                elif may_end:
                    leave.append(self.by_pre[self.tok_lo[child]:self.tok_hi[child]])
        return ins, incs, outs, (np.concatenate(leave).tolist() if leave else [])

    def _leaving(self, dfa: ByteDFA, state: int, depth: int, ids: list[int]) -> tuple:
        """Group tokens that may leave the lexeme by (accepting state, rest of the token)."""
        if trie_walk.available() and len(ids) > _KERNEL_LEAVING:
            rows = trie_walk.leave_rows(self.tok_off, self.tok_data, dfa, state, depth, ids)
        else:
            rows = self._leave_rows(dfa, state, depth, ids)
        tb = self.token_bytes
        groups: dict[tuple[int, bytes], list[tuple[int, int]]] = {}
        for t, p, a, c in zip(*rows):
            groups.setdefault((a, tb[t][p:]), []).append((t, c))
        return tuple((a, rest, tuple(toks)) for (a, rest), toks in groups.items())

    def _leave_rows(self, dfa: ByteDFA, state: int, depth: int, ids: list[int]) -> tuple[list, list, list, list]:
        """trie_walk.leave_rows in Python (few tokens; the tests' reference)."""
        rows, accl, cnt = dfa.table_list, dfa.accepting_list, dfa.count_rows
        out: tuple[list, list, list, list] = ([], [], [], [])
        for t in ids:
            data = self.token_bytes[t]
            s, c = state, 0
            for p in range(depth, len(data)):
                byte = data[p]
                if accl[s] and p > depth:
                    for o, v in zip(out, (t, p, s, c)):
                        o.append(v)
                ns = rows[s][byte]
                if ns < 0:
                    break
                c += cnt[s][byte]
                s = ns
        return out


def _merge(base: TokenClasses, part: TokenClasses, redo: np.ndarray,
           points: Callable[[TokenClasses], tuple]) -> TokenClasses:
    """`base` for tokens not in `redo` ([vocab] bool), `part` for those in it; `points` makes leave_points."""
    keep = ~redo[base.inside]

    def group() -> tuple:
        return tuple((a, rest, kept) for a, rest, toks in base.leaving
                     if (kept := tuple(x for x in toks if not redo[x[0]]))) + part.leaving

    return TokenClasses(np.concatenate([base.inside[keep], part.inside]), np.concatenate([base.inc[keep], part.inc]),
                        np.concatenate([base.end[keep], part.end]),
                        np.concatenate([base.leave_ids[~redo[base.leave_ids]], part.leave_ids]), group, points)
