"""Token masks per parse stack: which text tokens the parser accepts from one stack.

From a lexeme (Lex/Key frame on top) the mask is the lexeme DFA state's token classification (`TokenIndex.classify`),
trimmed for string length bounds and object names still allowed, plus the tokens that leave the lexeme
part-way and whose rest the stack below accepts, plus (if the lexeme may end here) the mask of the stack below.
From a structural position the vocabulary trie is walked byte by byte, but only along bytes that can come
next, and only until a stack enters a lexeme: below that trie node the lexeme's classification takes over."""
from __future__ import annotations

import re

import numpy as np

from ..automata.byte_dfa import ByteDFA
from ..ir.nodes import LexNode, Node
from ..vocab.token_index import TokenIndex
from .frames import END, LEXEMES, OBJ_NAMED, OBJ_VALUED, STRUCTURAL, End, Key, Lex, Obj, Ran, Seq, Stack, Value
from .parser import Parser

_DENSE = 4_096      # a lexeme's inside tokens past this many are OR-ed in as a cached packed mask
_FEW = 16           # tokens leaving a lexeme at one trie node up to this many are checked one by one
_EXPANDS = (Seq, End)   # frames whose tokens come from the lexemes they expand to (Parser.expand)
_CLOSERS = re.compile(rb"[,}\]]")     # the bytes that may make a structural frame give way (see _local_top)


class StackMasks:
    """Mask computation and caches for one grammar, shared by every request. The caches that grow with use are
    LruCaches charged to the index's budget (cache.py)."""

    def __init__(self, parser: Parser, nodes: list[Node], index: TokenIndex):
        self.parser, self.nodes, self.index = parser, nodes, index
        self.vocab_size = index.vocab_size
        self.words = (index.vocab_size + 31) // 32
        self._masks = index.cache("stack masks")
        self._far = index.cache("far masks")     # (stack below, lexeme node, DFA state) -> mask, see stack_mask
        self._leaving = index.cache("leaving tokens")
        self._need: dict[tuple, int] = {}           # per (DFA, state): bounded by the grammar's DFAs
        self._local = index.cache("local rests")    # (top frame, rest) -> accepted, see _local_ok
        self._local_toks = index.cache("local tokens")   # see _local_tokens
        self._grouped = index.derived_cache("json_leaving_groups")    # see _groups: shared by grammars
        self._below = index.cache("allowed below")  # (stack after a lexeme, trie node) -> see _allowed_below
        self._walked = index.cache("walked leaving")    # see _leaving_walked

    def classify_states(self, budget: int) -> None:
        """Classifies the vocabulary from the states of the grammar's lexeme DFAs (TokenIndex.classify at the
        trie's root, its leave points, the packed inside tokens where there are many), up to `budget` states,
        smallest DFAs first; a lexeme with a large DFA pays as it goes."""
        dfas = {n.dfa.key: n.dfa for n in self.nodes if isinstance(n, LexNode)}
        for dfa in sorted(dfas.values(), key=lambda d: d.num_states):
            budget -= dfa.num_states
            if budget < 0:
                break
            for s in range(dfa.num_states):
                cls = self.index.classify(dfa, s, 0)
                cls.leave_points        # grouped on first read (TokenClasses.leave_points)
                if len(cls.inside) > _DENSE:
                    self.index.packed_inside(dfa, s, 0)

    def stack_mask(self, stack: Stack) -> np.ndarray:
        """Packed int32 [words] bitmask of text tokens allowed from `stack` (EOS not included). Cached (~6 KB
        per stack)."""
        hit = self._masks.get(stack)
        if hit is not None:
            return hit
        top = stack[-1]
        if type(top) is Lex and self.nodes[top.node].counted:
            # a string's character count only matters near its bounds: far from them, every count gives the
            # same mask, so it is cached without the count
            node = self.nodes[top.node]
            c = top.nchars
            if c >= node.min_chars and (node.max_chars is None or
                                        node.max_chars - c >= self._max_need(node.dfa, top.state)):
                far = (stack[:-1], top.node, top.state)
                hit = self._far.get(far)
                if hit is None:
                    hit = self._far.put(far, self._compute(stack))
                return hit
        return self._masks.put(stack, self._compute(stack))

    def stack_mask_bool(self, stack: Stack) -> np.ndarray:
        """`stack_mask` unpacked to bool [vocab]."""
        return self._unpack(self.stack_mask(stack))

    def _unpack(self, packed: np.ndarray) -> np.ndarray:
        """A packed int32 [words] mask as bool [vocab]."""
        return np.unpackbits(packed.view(np.uint8), bitorder="little")[:self.vocab_size].astype(bool)

    def _max_need(self, dfa: ByteDFA, s: int) -> int:
        """Largest character count a token can add from DFA state s (plus what must follow), for caching."""
        key = (dfa.key, s)
        v = self._need.get(key)
        if v is None:
            cls = self.index.classify(dfa, s)
            need = cls.inc + dfa.char_dist[cls.end]
            v = self._need[key] = int(need.max(initial=0)) + self.index.max_depth + 1
        return v

    def _compute(self, stack: Stack) -> np.ndarray:
        mask = np.zeros(self.vocab_size, bool)        # sparse contributions, token by token
        extra: list[np.ndarray] = []                  # dense ones, as packed int32 [words] (cached, read-only)
        if isinstance(stack[-1], LEXEMES):
            self._lexeme_tokens(stack, 0, mask, extra)
            below = self.parser.lexeme_end(stack)
            if below is not None:
                # the lexeme may end right here: every token allowed after it is allowed now
                extra.append(self.stack_mask(below))
        else:
            self._walk_trie(stack, mask, extra)
        out = pack_mask(mask, self.words)
        for e in extra:
            out |= e
        return out

    def _lexeme_tokens(self, stack: Stack, node: int, mask: np.ndarray, extra: list) -> None:
        """`_lexeme_tokens_any`, less the tokens that would finish a tracked name as one the object already has
        (unique keys, see ObjectKeys.tracks_names): those below `node` that spell the rest of such a name."""
        top = stack[-1]
        taken = self._taken_names(stack, node) if type(top) is Key and top.name else None
        if taken is None:
            self._lexeme_tokens_any(stack, node, mask, extra)
            return
        local = np.zeros(self.vocab_size, bool)
        more: list[np.ndarray] = []
        self._lexeme_tokens_any(stack, node, local, more)
        for e in more:
            local |= self._unpack(e)
        local[taken] = False
        mask |= local

    def _taken_names(self, stack: Stack, node: int) -> np.ndarray | None:
        """int32 ids of the tokens below trie node `node` that would end the top Key frame's name as a name its
        object has seen (None: none can)."""
        name, seen = stack[-1].name, stack[-2].seen
        index = self.index
        out = []
        for n in seen:
            if type(n) is bytes and len(n) > len(name) and n.startswith(name):
                t = node
                for b in n[len(name):]:
                    t = index.children[t].get(b)
                    if t is None:
                        break
                else:
                    out.append(index.by_pre[index.tok_lo[t]:index.tok_hi[t]])
        return np.concatenate(out) if out else None

    def _lexeme_tokens_any(self, stack: Stack, node: int, mask: np.ndarray, extra: list) -> None:
        """Set in `mask` (or add to `extra` as packed masks) the tokens below trie node `node` (its prefix
        already read into `stack`, whose top is a Lex or Key frame) that the lexeme reads at least one more byte
        of: those it reads wholly, and those it leaves part-way whose rest the stack below accepts. (The lexeme
        ending right at `node` is the caller's business, see `Parser.lexeme_end`.)"""
        top = stack[-1]
        lex = self.nodes[top.node] if type(top) is Lex else None
        if lex is not None:
            dfa, s, c, counted = lex.dfa, top.state, top.nchars, lex.counted
        else:
            dfa, s, c, counted = self.parser.keys.dfa(top.node), top.state, 0, False
            if node == 0 and dfa.alias is not None:
                allowed = self.parser.keys.allowed_states(top.node, stack[-2].seen, stack[-2].nkeys)[0]
                plain = allowed[:dfa.alias.num_states]
                if plain.all() or not plain.any():
                    self._alias_key_tokens(stack, dfa, s, bool(plain[0]), allowed, mask, extra)
                    return
        cls = self.index.classify(dfa, s, node)
        ids = cls.inside
        if lex is None:
            # only names still allowed here: the token must end where an allowed name can be reached
            ids = ids[self.parser.keys.allowed_states(top.node, stack[-2].seen, stack[-2].nkeys)[0][cls.end]]
        elif counted:
            ok = np.ones(len(ids), bool)
            if lex.max_chars is not None:
                # room must remain for the shortest completion the lexeme DFA still needs
                ok &= cls.inc + dfa.char_dist[cls.end] <= lex.max_chars - c
            if lex.min_chars > c:
                # a token after which nothing more can count (that closes the string) must bring the count to
                # its least (minLength)
                ok &= ~dfa.frozen[cls.end] | (cls.inc >= lex.min_chars - c)
            ids = ids[ok]
        if len(ids) > _DENSE and len(ids) == len(cls.inside):
            extra.append(self.index.packed_inside(dfa, s, node))
        else:
            mask[ids] = True
        # tokens that end the lexeme part-way: which of them the stack below accepts does not depend on the
        # lexeme's character count, so it is cached per (dfa state, node, stack below) and only the count is
        # checked here
        walked = self._leaving_walked(stack, node, dfa, s) if lex is not None and not counted else None
        if walked is not None:
            mask[walked] = True
            return
        for t, dc in self._leaving_ok(stack, node, dfa, s, cls.leaving):
            if counted:
                c2 = c + dc
                if c2 < lex.min_chars or (lex.max_chars is not None and c2 > lex.max_chars):
                    continue
            mask[t] = True

    def _alias_key_tokens(self, stack: Stack, dfa: ByteDFA, s: int, other: bool, allowed: np.ndarray,
                          mask: np.ndarray, extra: list) -> None:
        """`_lexeme_tokens` at the trie root for a key DFA built on the plain-string DFA (`dfa.alias`), where
        every plain state is allowed or none is (`other`: names outside `properties` allowed). The plain part's
        results are shared by every key state and position: its inside tokens as one packed mask, its leaving
        tokens cached per stack below; only the first bytes where state `s` differs are classified apart."""
        alias = dfa.alias
        if s < alias.num_states:          # inside another name: exactly the plain string
            base_state, redo, part = s, None, None
            packed = self.index.packed_inside(alias, s) if other else None
        else:
            base_state = dfa.alias_ref
            _, redo, part, packed = self.index.split(dfa, s)
        if other:
            # every inside token of the plain part ends in a plain state, allowed like all of them
            extra.append(packed)
            first = self.index.token_first
            base = self.index.classify(alias, base_state)
            for t, _ in self._leaving_ok(stack, 0, alias, base_state, base.leaving):
                if redo is None or not redo[first[t]]:
                    mask[t] = True
        # (otherwise nothing from the plain part: its only accepting state is labelled "other name")
        if part is not None:
            mask[part.inside[allowed[part.end]]] = True
            for t, _ in self._leaving_ok(stack, 0, dfa, s, part.leaving, part=True):
                mask[t] = True

    def _leaving_ok(self, stack: Stack, node: int, dfa: ByteDFA, s: int, leaving, part: bool = False
                    ) -> tuple[tuple[int, int], ...]:
        """(token, characters before the end) for tokens that end the top lexeme part-way and whose rest the
        stack below accepts. Cached per (dfa, state, node, stack below the lexeme). `leaving` is
        `classify(dfa, s, node).leaving`, or with `part` the leaving groups of `TokenIndex.split`'s part."""
        key = (dfa.key, s, node, stack[:-1])     # below a Key frame: its Obj, with the names seen
        hit = self._leaving.get(key)
        if hit is None:
            # a tracked name (Key frame with a `name`) is recorded only where the rest may start another name of
            # the same object (a ',' then a '"'); elsewhere what follows does not depend on it, so it is left out
            # and the result is shared by every name (the name itself is checked by _taken_names)
            tracked = type(stack[-1]) is Key and bool(stack[-1].name)
            gkey = (dfa.key, s, node, part)
            out, per_name = [], []
            for a, (local, other) in self._groups(gkey, leaving).items():
                below = self.parser.finish(stack, a, b"" if tracked else None)
                if below is None:
                    continue
                out.extend(self._local_tokens(gkey, a, below, local))
                if not other:
                    continue
                first = self.parser.next_bytes(below)
                for rest, toks, cut in other:
                    if rest[0] not in first:
                        continue
                    comma = rest.find(b",")
                    if tracked and comma >= 0 and rest.find(b'"', comma) >= 0:
                        per_name.extend(toks)
                    elif (cut == 0 or self._local_ok(below, rest[:cut])) and self.parser.run((below,), rest):
                        out.extend(toks)
            hit = self._leaving.put(key, (tuple(out), tuple(per_name)))
        if not hit[1]:
            return hit[0]
        skip = self.index.depth[node]
        tb = self.index.token_bytes
        return hit[0] + tuple((t, dc) for t, dc in hit[1] if self.parser.run((stack,), tb[t][skip:]))

    def _leaving_walked(self, stack: Stack, node: int, dfa: ByteDFA, s: int) -> np.ndarray | None:
        """int64 ids of the tokens that leave an uncounted lexeme part-way on a sequence (any byte may make it
        give way) or on the end, whose rest the stack after the lexeme accepts (None for other frames): the
        tokens leaving at each trie node m (`TokenIndex.leave_points`), a few checked one by one, many at once
        from the tokens that stack allows under m (`_allowed_below`). Cached per (DFA state, node, stack below)."""
        key = (dfa.key, s, node, stack[:-1])
        hit = self._walked.get(key)
        if hit is not None:
            return hit
        below = self.parser.finish(stack, s)
        if type(below[-1]) not in _EXPANDS:
            return None
        tb, depth, children = self.index.token_bytes, self.index.depth, self.index.children
        first = self.parser.next_bytes(below)
        out = []
        for m, toks in self.index.leave_points(dfa, s, node):
            if first.isdisjoint(children[m]):
                continue                # no token goes on under m with a byte that may follow the lexeme
            if len(toks) <= _FEW:
                d = depth[m]
                out.append(np.array([t for t in toks.tolist() if tb[t][d] in first and
                                     self.parser.run((below,), tb[t][d:])], np.int64))
            else:
                out.append(toks[self._allowed_below(below, m)[toks]])
        return self._walked.put(key, np.concatenate(out) if out else np.zeros(0, np.int64))

    def _allowed_below(self, below: Stack, m: int) -> np.ndarray:
        """bool [vocab]: the tokens under trie node m whose bytes past m's prefix `below` accepts (a trie walk
        from m, lexemes classified where they start). Cached per (below, m)."""
        hit = self._below.get((below, m))
        if hit is None:
            mask = np.zeros(self.vocab_size, bool)
            extra: list[np.ndarray] = []
            self._walk_trie(below, mask, extra, root=m)
            for e in extra:
                mask |= self._unpack(e)
            hit = self._below.put((below, m), mask)
        return hit

    def _groups(self, gkey: tuple, leaving) -> dict:
        """`leaving` by accepting state: a -> (local: ((first byte, ((rest, toks), ...)), ...) for rests without
        ',', '}' or ']'; other: ((rest, toks, cut), ...), `cut` the index of the first of those bytes). Cached per
        (DFA key, state, trie node, part), which name the leaving groups in every grammar: in the index's cache."""
        hit = self._grouped.get(gkey)
        if hit is None:
            by: dict[int, tuple[dict, list]] = {}
            for a, rest, toks in leaving:
                local, other = by.setdefault(a, ({}, []))
                found = _CLOSERS.search(rest)
                if found is None:
                    local.setdefault(rest[0], []).append((rest, toks))
                else:
                    other.append((rest, toks, found.start()))
            # (tuples, not dicts: these live long in the cache, and tuples of untracked items leave the garbage
            # collector's lists)
            hit = self._grouped.put(gkey, {a: (tuple((b, tuple(g)) for b, g in lo.items()), tuple(ot))
                                           for a, (lo, ot) in by.items()})
        return hit

    def _local_top(self, below: Stack) -> Stack | None:
        """A short stack that accepts exactly the texts without ',', '}' or ']' that `below` (a stack after a
        lexeme) accepts, or None where that is not known (bounded whitespace runs). Such a text never makes the
        top frame give way, except a Value frame, which its value replaces: then the frame under it reads what
        follows the value (whitespace only, without those bytes). Objects after a name or a value lose their
        names seen, which only ',' and '}' and names read."""
        top = below[-1]
        k = type(top)
        if self.parser.ws_run is not None or k is Ran or k is Seq or (k is End and self.parser.ignore):
            return None     # (a sequence gives way to any byte: texts without those bytes included)
        if k is Value:
            under = below[-2]
            if type(under) is End:
                return (under, top)      # trailing whitespace as the End frame reads it (End.ws)
            if type(under) is not Obj or under.phase != OBJ_VALUED:
                return None
            return (END, _nameless(under), top)
        return (END, _nameless(top) if k is Obj else top)

    def _local_tokens(self, gkey: tuple, a: int, below: Stack, local: tuple) -> tuple:
        """The (token, dc) of `local` groups (by their rest's first byte) whose rest `below` accepts, cached per
        (gkey, a, _local_top)."""
        short = self._local_top(below)
        if short is None:
            first = self.parser.next_bytes(below)
            return tuple(x for b, group in local if b in first for rest, toks in group
                         if self.parser.run((below,), rest) for x in toks)
        key = (gkey, a, short)
        hit = self._local_toks.get(key)
        if hit is None:
            start = (short,)
            first = self.parser.next_bytes(short)
            hit = self._local_toks.put(key, tuple(x for b, group in local if b in first for rest, toks in group
                                                  if self.parser.run(start, rest) for x in toks))
        return hit

    def _local_ok(self, below: Stack, rest: bytes) -> bool:
        """Whether `below` accepts `rest`, a text without ',', '}' or ']'; cached per (_local_top, rest)."""
        short = self._local_top(below)
        if short is None:
            return bool(self.parser.run((below,), rest))
        key = (short, rest)
        hit = self._local.get(key)
        if hit is None:
            hit = self._local.put(key, bool(self.parser.run((short,), rest)))
        return hit

    def _walk_trie(self, stack: Stack, mask: np.ndarray, extra: list, root: int = 0) -> None:
        """Set in `mask` the tokens allowed from a structural position: depth-first over the vocabulary trie,
        visiting only children whose byte can come next. Where a stack enters a lexeme (Lex/Key on top), the
        tokens that go on inside it come from the lexeme's token classification below that trie node, and
        only the stack after the lexeme (if it may end there) walks on byte by byte; a sequence or the end hands
        over at once to the lexemes it may start (Parser.expand)."""
        parser = self.parser
        children, ends = self.index.children, self.index.ends
        allowed: list[int] = []
        todo = [(root, [stack])]
        while todo:
            node, stacks = todo.pop()
            struct: list[Stack] = []
            for st in stacks:
                while st is not None and isinstance(st[-1], LEXEMES):
                    self._lexeme_tokens(st, node, mask, extra)
                    st = parser.lexeme_end(st)
                if st is None:
                    continue
                if type(st[-1]) in _EXPANDS:
                    # a sequence or the end reads bytes only through lexemes: classify from where each starts
                    starts = parser.expand(st)
                    if starts is not None:
                        for e in starts:
                            self._lexeme_tokens(e, node, mask, extra)
                        continue
                if st not in struct:
                    struct.append(st)
            if not struct:
                continue
            nb: set[int] = set()
            for st in struct:
                nb |= parser.next_bytes(st)
            kids = children[node]
            if parser.ws and all(isinstance(st[-1], STRUCTURAL) for st in struct):
                # whitespace leaves these stacks as they are: take every run of it below `node` at once
                by_byte, ws_ends = self.index.ws_step(node)
                allowed.extend(ws_ends)
                nb -= parser.ws
                for b in nb:
                    cs = by_byte.get(b)
                    if cs is None:
                        continue
                    nxt = parser.run(struct, bytes((b,)))
                    if not nxt:
                        continue
                    for child in cs:
                        allowed.extend(ends[child])
                        if children[child]:
                            todo.append((child, nxt))
                continue
            for b in nb:
                child = kids.get(b)
                if child is None:
                    continue
                nxt = parser.run(struct, bytes((b,)))
                if not nxt:
                    continue
                allowed.extend(ends[child])
                if children[child]:
                    todo.append((child, nxt))
        mask[allowed] = True


def _nameless(obj: Obj) -> Obj:
    """An object frame after a name or a value without its names seen and count (other phases: as it is)."""
    if obj.phase == OBJ_NAMED or obj.phase == OBJ_VALUED:
        return Obj(obj.node, obj.phase, frozenset(), 0, obj.value)
    return obj


def pack_mask(mask: np.ndarray, words: int) -> np.ndarray:
    """bool [vocab] -> int32 [words], bit j of word w = token 32*w+j."""
    bits = np.packbits(mask, bitorder="little")
    if bits.size < words * 4:
        bits = np.concatenate([bits, np.zeros(words * 4 - bits.size, np.uint8)])
    return bits.view("<i4").astype(np.int32, copy=False)
