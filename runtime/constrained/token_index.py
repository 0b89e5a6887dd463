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
from collections import OrderedDict
import threading

import numpy as np

from .byte_dfa import ByteDFA

_CLASSIFY_CACHE = 512


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
        self._cache: OrderedDict[tuple[str, int], tuple] = OrderedDict()   # ~300 KB an entry
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
        # first byte of each node's prefix (root: 256, sorts last)
        first = np.full(self.num_nodes, 256, np.int64)
        for n in range(1, self.num_nodes):
            first[n] = byte[n] if depth[n] == 1 else first[parent[n]]
        # nodes grouped by depth, and within a depth by first byte (so a first byte's subtree is one slice)
        order = np.lexsort((first, depth_a))
        self.max_depth = int(depth_a.max())
        pos = np.empty(self.num_nodes, np.int64)
        pos[order] = np.arange(self.num_nodes)
        bounds = np.searchsorted(depth_a[order], np.arange(self.max_depth + 2))
        parent_a, byte_a = np.array(parent), np.array(byte)
        # per depth d >= 1: (start, end, parents' flat positions, bytes, per-first-byte slice bounds [257])
        self.levels = []
        for d in range(1, self.max_depth + 1):
            nodes = order[bounds[d]:bounds[d + 1]]
            fb = np.searchsorted(first[nodes], np.arange(257))
            self.levels.append((int(bounds[d]), int(bounds[d + 1]), pos[parent_a[nodes]], byte_a[nodes], fb))
        self.token_pos = pos[node_of]                     # flat position of each token's node
        self.token_first = np.array([b[0] if b else 256 for b in self.token_bytes])
        self.is_text = np.zeros(self.vocab_size, bool)
        self.is_text[self.text_tokens] = True

    def classify(self, dfa: ByteDFA, state: int):
        """Walk a lexeme DFA over the whole vocabulary from `state`. Returns (inside, inc, leaving, end_state):
        inside [vocab] bool: the DFA consumes the whole token and stays alive;
        inc [vocab] int32: characters started along the token (bytes leaving a boundary state, other than the
            closing quote), for counted strings;
        leaving: list of (token, ends) for tokens not inside, before some byte p > 0 of which the DFA is
            accepting (the lexeme may end there); ends = [(p, accepting state, inc up to p)];
        end_state [vocab]: DFA state after the token (num_states = dead).
        Cached per (dfa.key, state), so equal DFAs in different grammars share the work. A DFA built on top of
        another (`dfa.alias`: same numbering for its first states) reuses the other's results: wholly for
        those states, and for a state that differs from `dfa.alias_ref` only on a few first bytes, everything
        but those bytes' subtrees."""
        key = (dfa.key, state)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        alias = dfa.alias
        if alias is not None and state < alias.num_states:
            out = self.classify(alias, state)
        elif alias is not None:
            ref = dfa.alias_ref
            row, ref_row = dfa.table[state], dfa.table[ref]
            differ = np.nonzero(row != ref_row)[0]
            base = self.classify(dfa, ref)
            out = self._walk(dfa, state, differ, base)
        else:
            out = self._walk(dfa, state, None, None)
        with self._lock:
            self._cache[key] = out
            while len(self._cache) > _CLASSIFY_CACHE:
                self._cache.popitem(last=False)
        return out

    def _walk(self, dfa: ByteDFA, state: int, only, base):
        """The vectorised walk; with `only` (first bytes), just those subtrees, the rest copied from `base`."""
        table, acc = dfa.walk_table, dfa.walk_accepting
        bnd = dfa.walk_boundary
        dead = dfa.num_states
        st = np.full(self.num_nodes, dead, np.int32)
        anc = np.zeros(self.num_nodes, bool)              # DFA accepting before some byte p > 0
        inc = np.zeros(self.num_nodes, np.int32)
        st[0] = state
        first = True
        for lo, hi, ppos, b, fb in self.levels:
            if only is None:
                sel = slice(lo, hi)
                pp, bb = ppos, b
            else:
                if len(only) == 0:
                    break
                idx = np.concatenate([np.arange(fb[x], fb[x + 1]) for x in only])
                if idx.size == 0:
                    break
                sel = lo + idx
                pp, bb = ppos[idx], b[idx]
            ps = st[pp]
            alive = ps != dead
            if not alive.any() and not anc[pp].any():
                break
            st[sel] = table[ps, bb]
            anc[sel] = anc[pp] | (acc[ps] & (not first))
            inc[sel] = inc[pp] + (bnd[ps] & (bb != 0x22))
            first = False
        tok_state = st[self.token_pos]
        tok_inc = inc[self.token_pos]
        tok_anc = anc[self.token_pos]
        inside = (tok_state != dead) & self.is_text
        # characters still needed after the token (for maxLength), and whether the token closes the lexeme
        need = np.minimum(tok_inc + dfa.char_dist[tok_state], 30000).astype(np.int16)
        closes = dfa.walk_accepting[tok_state]
        tok_inc = tok_inc.astype(np.int16)
        if base is not None:
            # tokens outside the re-walked subtrees behave as from the reference state
            redo = np.isin(self.token_first, only)
            inside = np.where(redo, inside, base[0])
            tok_inc = np.where(redo, tok_inc, base[1])
            need = np.where(redo, need, base[3])
            closes = np.where(redo, closes, base[4])
        leaving_ids = np.nonzero(tok_anc & ~((tok_state != dead) & self.is_text) & self.is_text)[0]
        rows, accl, bl = dfa.table_list, dfa.accepting_list, dfa.boundary_list
        leaving = [] if base is None else [(t, e) for t, e in base[2] if not redo[t]]
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
        return (inside, tok_inc, leaving, need, closes)
