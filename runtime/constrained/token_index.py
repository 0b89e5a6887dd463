"""The vocabulary as a byte trie, for computing token masks.

Two walks over it:
- `classify(dfa, state)`: vectorised (one numpy gather per trie depth) walk of a lexeme DFA from one state. It
  sorts every token into "stays inside the lexeme and lives" (allowed whatever the context) or "may leave the
  lexeme" (the lexeme could end before the token does; the caller checks those few against the parse stack).
  Cached per (dfa.key, state): equal DFAs in different grammars share the work.
- `children` / `ends`: the same trie as Python lists, for the parser's own byte-by-byte walk at structural
  positions (after `{`, `,` ...), where pruning leaves only a few hundred nodes to visit."""
from __future__ import annotations

import gc
import threading

import numpy as np

from .byte_dfa import ByteDFA


class TokenIndex:
    """Immutable view of a tokenizer's vocabulary (plus caches that only grow). One per tokenizer."""

    def __init__(self, tokenizer):
        self.vocab_size = tokenizer.vocab_size
        self.eos_token_id = tokenizer.eos_token_id
        self.token_bytes: list[bytes] = list(tokenizer.all_token_bytes())
        special = set(tokenizer.special_token_ids)
        # candidates: tokens that stand for text; special tokens (incl. EOS) are never sampled as text
        self.text_tokens = [i for i, b in enumerate(self.token_bytes) if b and i not in special]
        self._build_trie()
        lengths = np.zeros(self.vocab_size, np.int64)
        for i in self.text_tokens:
            lengths[i] = len(self.token_bytes[i])
        self.lengths = lengths
        # characters in tokens without quote/backslash: bytes that are not UTF-8 continuation bytes
        nchars = np.zeros(self.vocab_size, np.int64)
        plain = np.zeros(self.vocab_size, bool)
        for i in self.text_tokens:
            b = self.token_bytes[i]
            nchars[i] = sum(1 for x in b if x & 0xC0 != 0x80)
            plain[i] = b"\\" not in b and b'"' not in b
        self.nchars = nchars
        self.plain = plain
        self._cache: dict[tuple[str, int], tuple] = {}
        self._lock = threading.Lock()
        # the trie is ~200k long-lived Python objects; without this, full GC passes over them cost up to a
        # second in the middle of a mask computation. Freezing moves what exists now out of GC's way.
        gc.freeze()

    def _build_trie(self) -> None:
        children: list[dict[int, int]] = [{}]
        ends: list[list[int]] = [[]]
        depth = [0]
        parent = [0]
        byte = [0]
        node_of = np.zeros(self.vocab_size, np.int64)
        for i in self.text_tokens:
            n = 0
            for b in self.token_bytes[i]:
                nxt = children[n].get(b)
                if nxt is None:
                    nxt = len(children)
                    children[n][b] = nxt
                    children.append({})
                    ends.append([])
                    depth.append(depth[n] + 1)
                    parent.append(n)
                    byte.append(b)
                n = nxt
            ends[n].append(i)
            node_of[i] = n
        self.children = children
        self.ends = ends
        self.num_nodes = len(children)
        depth_a = np.array(depth)
        order = np.argsort(depth_a, kind="stable")        # nodes grouped by depth
        self.max_depth = int(depth_a.max())
        pos = np.empty(self.num_nodes, np.int64)
        pos[order] = np.arange(self.num_nodes)
        bounds = np.searchsorted(depth_a[order], np.arange(self.max_depth + 2))
        parent_a, byte_a = np.array(parent), np.array(byte)
        # per depth d >= 1: the flat positions of its nodes' parents and their bytes
        self.levels = []
        for d in range(1, self.max_depth + 1):
            nodes = order[bounds[d]:bounds[d + 1]]
            self.levels.append((bounds[d], bounds[d + 1], pos[parent_a[nodes]], byte_a[nodes]))
        self.token_pos = pos[node_of]                     # flat position of each token's node
        self.is_text = np.zeros(self.vocab_size, bool)
        self.is_text[self.text_tokens] = True

    def classify(self, dfa: ByteDFA, state: int):
        """Walk a lexeme DFA over the whole vocabulary from `state`. Returns (inside, inc, leaving):
        inside [vocab] bool: the DFA consumes the whole token and stays alive;
        inc [vocab] int32: characters started along the token (bytes leaving a boundary state, other than the
            closing quote), for counted strings;
        leaving: list of (token, ends) for tokens not inside, before some byte p of which the DFA is accepting
            (the lexeme may end there); ends = [(p, accepting state, inc up to p)].
        Cached per (dfa.key, state), so equal DFAs in different grammars share the work."""
        key = (dfa.key, state)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        table, acc = dfa.walk_table, dfa.walk_accepting
        bnd = dfa.walk_boundary
        dead = dfa.num_states
        st = np.empty(self.num_nodes, np.int32)
        anc = np.zeros(self.num_nodes, bool)              # DFA accepting before some byte of this prefix
        inc = np.zeros(self.num_nodes, np.int32)
        st[0] = state
        for lo, hi, ppos, b in self.levels:
            ps = st[ppos]
            alive = (ps != dead) | anc[ppos]
            if not alive.any():
                st[lo:] = dead
                break
            st[lo:hi] = table[ps, b]
            anc[lo:hi] = anc[ppos] | acc[ps]
            inc[lo:hi] = inc[ppos] + (bnd[ps] & (b != 0x22))
        tok_state = st[self.token_pos]
        inside = (tok_state != dead) & self.is_text
        tok_inc = inc[self.token_pos]
        # tokens the lexeme can leave before their first byte are the caller's business (mask of the stack
        # below); list only those that leave after consuming part of the token
        if acc[state]:
            anc[:] = False
            for lo, hi, ppos, b in self.levels:
                ps = st[ppos]
                if not ((ps != dead) | anc[ppos]).any():
                    break
                anc[lo:hi] = anc[ppos] | (acc[ps] & (ppos != 0))
        leaving_ids = np.nonzero(anc[self.token_pos] & ~inside & self.is_text)[0]
        rows, accl, bl = dfa.table_list, dfa.accepting_list, dfa.boundary_list
        leaving = []
        for t in leaving_ids.tolist():
            data = self.token_bytes[t]
            s, c, ends = state, 0, []
            for p, byte in enumerate(data):
                if accl[s] and p > 0:
                    ends.append((p, s, c))
                ns = rows[s][byte]
                if ns < 0:
                    break
                if bl[s] and byte != 0x22:
                    c += 1
                s = ns
            leaving.append((t, ends))
        out = (inside, tok_inc, leaving, tok_state)
        with self._lock:
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[key] = out
        return out
