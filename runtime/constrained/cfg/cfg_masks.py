"""Token masks per parse stack of a context-free grammar (cfg_parser.py), built on the vocabulary trie walks the
JSON path uses (vocab/token_index.py), cached per stack.

A stack's mask is: the tokens its top lexeme reads wholly (`TokenIndex.classify`, cached per DFA state and
shared by every grammar with an equal DFA); the tokens that leave the lexeme part-way with a rest the stacks
after the lexeme accept; and, if the lexeme may end right here, the masks of those stacks. Leaving tokens are
grouped by the trie node where they leave (the prefix the lexeme read): where many leave at one node (a space
before words), the tokens below that node are classified from the next lexemes at once, recursively and
deeper in the trie each time; where few do, their rests are run through the parser (`TokenIndex.leave_points`
gives the groups, shared by every grammar with an equal DFA).

A subgrammar on top (a structural tag's JSON value) gives its own grammar's cached mask for the tokens it reads
wholly; the tokens that leave it part-way are those holding, past their first byte, a byte that may follow it
(a structure's end: one byte, a few hundred tokens), each run through the parser."""
from __future__ import annotations

import numpy as np

from ..vocab.token_index import TokenIndex
from .cfg_parser import CfgParser, Inside, Opaque, Stack

_FEW_INSIDE = 32     # inside tokens past this many are OR-ed in as a cached packed mask (TokenIndex.packed_inside)
_FEW = 16            # tokens leaving at one trie node up to this many are checked one by one
_ROOT_STATES = 512   # DFA states classify_roots classifies at compile time (~40 us each)
_KEEP = 1            # stack entries below the top lexeme a mask is first computed from (see stack_mask)


class CfgMasks:
    """Mask computation and caches for one grammar, shared by every request (writes hold the lock)."""

    def __init__(self, parser: CfgParser, index: TokenIndex):
        self.parser, self.index = parser, index
        self.vocab_size = index.vocab_size
        self.words = (index.vocab_size + 31) // 32
        self._zeros = np.zeros(self.words, np.int32)
        # charged to the index's budget (cache.py)
        self._masks = index.cache("cfg stack masks")
        self._below = index.cache("cfg masks below")   # (stack below a lexeme, trie node) -> packed mask
        self._deep = index.cache("cfg deep stacks")    # shortened stacks whose mask needs what they left out

    def classify_roots(self) -> None:
        """Classifies the vocabulary from the states of the terminals' DFAs (TokenIndex.classify at the trie's
        root, its leave points, and the packed inside tokens where there are many): the shared, per-DFA part of
        every mask, done at compile time rather than in the first masks that meet each state (SQL's first-pass
        mask median 55 -> 40 us, for ~6 ms more compile time). Up to _ROOT_STATES states, smallest DFAs first
        (a grammar's keywords): a terminal with a large DFA pays as it goes."""
        budget = _ROOT_STATES
        for dfa in sorted(filter(None, self.parser.dfas), key=lambda d: d.num_states):
            budget -= dfa.num_states
            if budget < 0:
                break
            for s in range(dfa.num_states):
                cls = self.index.classify(dfa, s, 0)
                cls.leave_points        # grouped on first read (TokenClasses.leave_points)
                if len(cls.inside) > _FEW_INSIDE:
                    self.index.packed_inside(dfa, s, 0)

    def stack_mask(self, stack: Stack) -> np.ndarray:
        """Packed int32 [words] bitmask of text tokens allowed from `stack` (EOS not included). Cached.
        A mask rarely depends on more than the stack's top few entries: it is computed on the stack shortened
        to those (CfgParser.shorten), cached under that, and shared by every stack with the same top, unless
        the computation reaches below them (Opaque): then on the whole stack."""
        hit = self._masks.get(stack)
        if hit is not None:
            return hit
        short = self.parser.shorten(stack, _KEEP + 1)
        if short == stack or short in self._deep:
            return self._compute(stack)
        try:
            hit = self.stack_mask(short)
        except Opaque:
            self._deep.put(short, True)
            hit = self._compute(stack)
        return self._masks.put(stack, hit)

    def _compute(self, stack: Stack) -> np.ndarray:
        if not stack:
            return self._zeros
        ones: list[int] = []
        extra: list[np.ndarray] = []
        self._lexeme_tokens(stack, 0, ones, extra)
        if self.parser.may_end(stack[-1]):
            # the lexeme may end right here: every token allowed after it is allowed now
            extra.extend(self.stack_mask(succ) for succ in self.parser.complete(stack[:-1]) if succ)
        return self._masks.put(stack, _pack(ones, self.words, extra))

    def _lexeme_tokens(self, stack: Stack, node: int, ones: list[int], extra: list) -> None:
        """Append to `ones` (or to `extra`, as packed masks) the tokens below trie node `node` (its prefix already
        read into `stack`) that the top lexeme reads at least one more byte of: wholly, or leaving it part-way
        with a rest that the stacks after the lexeme accept."""
        if type(stack[-1]) is Inside:
            self._subgrammar_tokens(stack, node, ones, extra)
            return
        t, s = self.parser.lex(stack)
        dfa = self.parser.dfas[t]
        cls = self.index.classify(dfa, s, node)
        if len(cls.inside) > _FEW_INSIDE:
            extra.append(self.index.packed_inside(dfa, s, node))     # cached, shared with every grammar
        else:
            ones.extend(cls.inside.tolist())
        if not len(cls.leave_ids):
            return
        below = stack[:-1]
        verdict: dict[bytes, bool] = {}     # rest -> accepted after the lexeme (rests repeat: '",')
        tb, depth = self.index.token_bytes, self.index.depth
        for m, toks in self.index.leave_points(dfa, s, node):
            if len(toks) > _FEW:
                # the lexeme is accepting at m (its state there is the same for every token below m), so every
                # token below m that the stacks after it accept from m on is allowed, leaving at m or not
                extra.append(self._tokens_below(below, m))
                continue
            cut = depth[m]
            for tok in toks.tolist():
                rest = tb[tok][cut:]
                ok = verdict.get(rest)
                if ok is None:
                    ok = verdict[rest] = bool(self.parser.run_after(below, rest))
                if ok:
                    ones.append(tok)

    def _subgrammar_tokens(self, stack: Stack, node: int, ones: list[int], extra: list) -> None:
        """`_lexeme_tokens` for a subgrammar on top. At the trie's root: its grammar's own cached mask (the tokens
        it reads wholly), and those of the tokens holding a byte that may follow the lexeme past their first that
        the parser accepts. Below a node (the subgrammar starts there, after a lexeme that ended on the node's
        prefix): the tokens whose next byte it can read, each run through the parser."""
        top = stack[-1]
        sub = self.parser.subs[top.term]
        first = sub.next_bytes(top.stack)
        tb, index = self.index.token_bytes, self.index
        if node == 0:
            extra.append(sub.stack_mask(top.stack))
            candidates = [t for t in self._holding(frozenset(self.parser.follow_bytes(stack[:-1])))
                          if tb[t][0] in first]
        else:
            kids = index.children[node]
            candidates = [t for b in first if b in kids for t in index.by_pre[index.tok_lo[kids[b]]:
                                                                               index.tok_hi[kids[b]]].tolist()]
        cut = index.depth[node]
        ones.extend(t for t in candidates if self.parser.run((stack,), tb[t][cut:]))

    def _holding(self, follow: frozenset) -> list[int]:
        """The text tokens holding one of the bytes `follow` past their first. Cached per vocabulary."""
        cache = self.index.derived_cache("cfg_holding")
        hit = cache.get(follow)
        if hit is None:
            index = self.index
            at = np.flatnonzero(np.isin(index.tok_data, np.fromiter(follow, np.uint8, len(follow))))
            tok = np.searchsorted(index.tok_off, at, side="right") - 1     # the token each byte is in
            tok = np.unique(tok[at != index.tok_off[tok]])                 # past its first byte
            hit = cache.put(follow, tok[index.is_text[tok]].tolist())
        return hit

    def _tokens_below(self, below: Stack, node: int) -> np.ndarray:
        """Packed mask of the tokens below trie node `node` (whose prefix ended a lexeme on `below`) that the
        stacks after that lexeme accept. Cached per (below, node)."""
        key = (below, node)
        hit = self._below.get(key)
        if hit is None:
            ones: list[int] = []
            extra: list[np.ndarray] = []
            for succ in self.parser.complete(below):
                if succ:      # a lexeme at its start: it reads the next byte (lexemes are never empty)
                    self._lexeme_tokens(succ, node, ones, extra)
            hit = self._below.put(key, _pack(ones, self.words, extra))
        return hit



def _pack(ones: list[int], words: int, extra: list[np.ndarray]) -> np.ndarray:
    """A new packed int32 [words] mask (bit j of word w = token 32*w+j): the tokens in `ones` OR-ed with the packed
    masks in `extra` (a mask is built from these two without a bool [vocab] array: filling one and packing it cost
    more than the rest of a small stack's mask)."""
    if extra:
        out = extra[0] | extra[1] if len(extra) > 1 else extra[0].copy()
        for e in extra[2:]:
            out |= e
    else:
        out = np.zeros(words, np.int32)
    if ones:
        idx = np.array(ones, np.int64)
        np.bitwise_or.at(out.view(np.uint32), idx >> 5, np.left_shift(np.uint32(1), (idx & 31).astype(np.uint32)))
    return out
