"""The vocabulary as a byte trie over the text tokens' raw bytes, with the index arrays the classification walks
use: preorder token ranges per node, the preorder arrays of the compiled scan, packed masks by first byte."""
from __future__ import annotations

import numpy as np

from sglite.kernels.trie_walk_cpu import PreorderTrie


class VocabTrie:
    """`children[n]`: byte -> child node; `ends[n]`: tokens whose bytes end at node n (root: 0). Immutable.

    The trie is ~100k nodes for a 49k vocabulary, kept as Python containers for the byte-by-byte walks. Only
    containers the garbage collector tracks cost it anything: dicts of ints are untracked, and so are tuples of
    ints once a collection has seen them, so `ends` is tuples (as lists: 100k tracked objects, which every full
    collection traverses)."""

    def __init__(self, tokenizer):
        self.vocab_size = tokenizer.vocab_size
        self.eos_token_id = tokenizer.eos_token_id
        self.token_bytes: list[bytes] = list(tokenizer.all_token_bytes())
        special = set(tokenizer.special_token_ids)
        # candidates: tokens that stand for text; special tokens (incl. EOS) are never sampled as text
        self.text_tokens = [i for i, b in enumerate(self.token_bytes) if b and i not in special]
        self._build_trie()

    def _build_trie(self) -> None:
        children: list[dict[int, int]] = [{}]
        ends: list[list[int]] = [[]]
        depth = [0]
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
                    byte.append(b)
                n = nxt
            ends[n].append(i)
            node_of[i] = n
        self.children = children
        self.ends: list[tuple[int, ...]] = [tuple(e) if e else () for e in ends]
        self.depth = depth
        self.num_nodes = len(children)
        self._build_ranges(node_of)
        self.max_depth = max(depth)
        token_len = np.array([len(self.token_bytes[t]) for t in self.by_pre.tolist()], np.int32)
        self.scan = PreorderTrie(self.preorder, depth, np.array(byte), self.subtree_size, self.tok_lo, token_len)
        # the tokens' bytes end to end: token t is tok_data[tok_off[t]:tok_off[t + 1]]
        self.tok_off = np.zeros(self.vocab_size + 1, np.int64)
        self.tok_off[1:] = np.cumsum([len(b) for b in self.token_bytes])
        self.tok_data = np.frombuffer(b"".join(self.token_bytes), np.uint8)
        self.token_first = np.array([b[0] if b else 256 for b in self.token_bytes])
        self.is_text = np.zeros(self.vocab_size, bool)
        self.is_text[self.text_tokens] = True
        self.words = (self.vocab_size + 31) // 32
        # int32 [257, words]: packed masks of the text tokens by first byte
        by_first = np.zeros((257, self.words * 32), bool)
        by_first[self.token_first[self.text_tokens], self.text_tokens] = True
        self.first_packed = np.packbits(by_first, axis=1, bitorder="little").view("<i4").astype(np.int32)

    def tokens_below(self, node: int) -> np.ndarray:
        """int32 ids of the text tokens strictly below trie node `node` (longer than its prefix): in preorder a
        node's own tokens come first, then its subtree's (`_build_ranges`)."""
        return self.by_pre[self.tok_lo[node] + len(self.ends[node]):self.tok_hi[node]]

    def _build_ranges(self, node_of: np.ndarray) -> None:
        """Preorder token ranges: the tokens below node n (n included) are `by_pre[tok_lo[n]:tok_hi[n]]`."""
        pre = np.zeros(self.num_nodes, np.int64)
        size = [1] * self.num_nodes
        order, stack = [], [0]
        while stack:
            n = stack.pop()
            pre[n] = len(order)
            order.append(n)
            stack.extend(sorted(self.children[n].values(), reverse=True))
        for n in reversed(order):           # children come after their parent in preorder
            for c in self.children[n].values():
                size[n] += size[c]
        self.subtree_size = size
        self.preorder = np.asarray(order, np.int64)     # preorder position -> node
        tok_pre = pre[node_of[self.text_tokens]]
        by = np.argsort(tok_pre, kind="stable")
        self.by_pre = np.asarray(self.text_tokens, np.int32)[by]
        sorted_pre = tok_pre[by]
        ends_at = pre + np.array(size)
        self.tok_lo = np.searchsorted(sorted_pre, pre).tolist()
        self.tok_hi = np.searchsorted(sorted_pre, ends_at).tolist()
