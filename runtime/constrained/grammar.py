"""A compiled grammar: lexeme DFAs inside a small pushdown parser for JSON structure.

Parse state is a tuple of stacks (nondeterminism from `anyOf` keeps several); a stack is a tuple of frames,
bottom first:
    ("E",)                              end of input: nothing but EOS may follow
    ("V", node)                         a value of `node` is expected (leading whitespace allowed)
    ("L", node, dfa_state, nchars)      inside a lexeme of LexNode `node`
    ("K", node, seen, nkeys, dfa_state) inside a property name of ObjectNode `node`
    ("O", node, phase, seen, nkeys, value_node)   object; phase 0 after '{', 1 after a name, 2 after a value,
                                                  3 after ','
    ("A", node, phase, index)           array; phase 0 after '[', 1 after an item, 2 after ','
The grammar itself is immutable; its caches (masks per stack, key DFAs) only grow and are safe to share."""
from __future__ import annotations

import threading
from typing import Iterable

import numpy as np

from .byte_dfa import ByteDFA
from .charfsm import literal_trie
from .key_dfa import words_dfa
from .nodes import EXTRA, ArrayNode, LexNode, NeverNode, Node, ObjectNode, UnionNode
from .token_index import TokenIndex

WS = frozenset(b" \t\n\r")
Stack = tuple
_MASK_CACHE_LIMIT = 8_192


class Grammar:
    """Immutable compiled grammar shared by all requests; `matcher()` gives per-request state."""

    def __init__(self, kind: str, spec: str, index: TokenIndex, nodes: list[Node], root: int,
                 whitespace: str = "any", root_frame: str = "V", property_order: str = "any"):
        self.kind, self.spec, self.index = kind, spec, index
        self.nodes = nodes
        self.root = root
        self.ws = WS if whitespace == "any" else frozenset()
        self.whitespace = whitespace
        # "schema" (generation mode): named properties come in the schema's order, a required one is never
        # skipped, and other names only once every required one is there, so keys are forced text
        self.ordered = property_order == "schema"
        self.sat = _satisfiable(nodes)
        if not self.sat[root]:
            from .errors import GrammarError
            raise GrammarError(f"{kind} {spec[:200]!r} admits no value at all")
        if root_frame == "L":
            node = nodes[root]
            self.initial: tuple[Stack, ...] = ((("E",), ("L", root, node.dfa.start, 0)),)
        else:
            self.initial = ((("E",), ("V", root)),)
        self._masks: dict[Stack, np.ndarray] = {}
        self._next: dict[Stack, frozenset] = {}
        self._leaving: dict[tuple, list] = {}
        self._need: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self.vocab_size = index.vocab_size
        self.words = (index.vocab_size + 31) // 32

    def matcher(self):
        from .matcher import GrammarMatcher
        return GrammarMatcher(self)

    def __repr__(self) -> str:
        return f"Grammar({self.kind}, {len(self.nodes)} nodes, {self.spec[:60]!r})"

    # --- stepping ----------------------------------------------------------------------------------------------
    def step(self, stack: Stack, b: int) -> list[Stack]:
        """All stacks reachable from `stack` by consuming byte `b` (empty: rejected)."""
        top = stack[-1]
        k = top[0]
        rest = stack[:-1]
        if k == "L":
            node = self.nodes[top[1]]
            dfa = node.dfa
            s = top[2]
            out = []
            ns = dfa.table_list[s][b]
            if ns >= 0:
                c = top[3]
                if node.counted:
                    if dfa.boundary_list[s] and b != 0x22:
                        c += 1
                        if node.max_chars is None:
                            c = min(c, node.min_chars)
                    ok = (node.max_chars is None or c + dfa.char_dist[ns] <= node.max_chars) and \
                        (not dfa.accepting_list[ns] or c >= node.min_chars)
                else:
                    ok = True
                if ok:
                    out.append(rest + (("L", top[1], ns, c),))
            if dfa.accepting_list[s]:
                out.extend(self.step(rest, b))
            return out
        if k == "K":
            node = self.nodes[top[1]]
            dfa = self.key_dfa(top[1], top[2], top[3])
            s = top[4]
            ns = dfa.table_list[s][b]
            if ns >= 0:
                return [rest + (("K", top[1], top[2], top[3], ns),)]
            if dfa.accepting_list[s]:
                below = self._finish(stack, s)
                return self.step(below, b) if below is not None else []
            return []
        if k == "V":
            if b in self.ws:
                return [stack]
            return self._start_value(rest, top[1], b)
        if k == "O":
            phase = top[2]
            if b in self.ws:
                return [stack]
            node = self.nodes[top[1]]
            seen, nk = top[3], top[4]
            if phase in (0, 3) and b == 0x22:
                dfa = self.key_dfa(top[1], seen, nk)
                ns = dfa.table_list[dfa.start][b]
                if ns >= 0:
                    return [stack + (("K", top[1], seen, nk, ns),)]
                return []
            if (phase == 0 or phase == 2) and b == 0x7D:   # '}'
                return [rest] if self._can_close(node, seen, nk) else []
            if phase == 1 and b == 0x3A:                     # ':'
                return [rest + (("O", top[1], 2, seen, nk, -1), ("V", top[5]))]
            if phase == 2 and b == 0x2C:                     # ','
                return [rest + (("O", top[1], 3, seen, nk, -1),)] if self._key_choices(node, seen, nk) else []
            return []
        if k == "A":
            phase, i = top[2], top[3]
            if b in self.ws:
                return [stack]
            node = self.nodes[top[1]]
            hi = self._max_items(node)
            if phase == 1:
                if b == 0x2C:
                    return [rest + (("A", top[1], 2, i),)] if (hi is None or i < hi) else []
                if b == 0x5D:
                    return [rest] if i >= node.min_items else []
                return []
            if phase == 0 and b == 0x5D:
                return [rest] if node.min_items == 0 else []
            if hi is not None and i >= hi:
                return []
            item = node.item(i)
            cap = max(len(node.prefix), node.min_items) + 1
            nxt = i + 1 if (node.max_items is not None or i + 1 <= cap) else cap
            return self._start_value(rest + (("A", top[1], 1, nxt),), item, b)
        return []   # "E": nothing may follow the value

    def _start_value(self, below: Stack, nid: int, b: int, visiting: frozenset = frozenset()) -> list[Stack]:
        if not self.sat[nid] or nid in visiting:   # `visiting`: unions that refer back to themselves
            return []
        node = self.nodes[nid]
        if isinstance(node, LexNode):
            return self.step(below + (("L", nid, node.dfa.start, 0),), b)
        if isinstance(node, ObjectNode):
            return [below + (("O", nid, 0, frozenset(), 0, -1),)] if b == 0x7B else []
        if isinstance(node, ArrayNode):
            return [below + (("A", nid, 0, 0),)] if b == 0x5B else []
        if isinstance(node, UnionNode):
            out = []
            for a in node.alts:
                for s in self._start_value(below, a, b, visiting | {nid}):
                    if s not in out:
                        out.append(s)
            return out
        return []

    def run(self, stacks: Iterable[Stack], data: bytes) -> list[Stack]:
        """Stacks after consuming all of `data` from any of `stacks` (deduplicated, order kept)."""
        cur = list(stacks)
        for b in data:
            nxt: list[Stack] = []
            seen = set()
            for st in cur:
                for s in self.step(st, b):
                    if s not in seen:
                        seen.add(s)
                        nxt.append(s)
            if not nxt:
                return []
            cur = nxt
        return cur

    def accepting(self, stack: Stack) -> bool:
        """Whether the input may end here (EOS allowed)."""
        while True:
            top = stack[-1]
            if top[0] == "E":
                return True
            if top[0] != "L":
                return False
            node = self.nodes[top[1]]
            if not node.dfa.accepting_list[top[2]]:
                return False
            stack = stack[:-1]

    # --- objects -----------------------------------------------------------------------------------------------
    def _required(self, node: ObjectNode, seen: frozenset) -> frozenset:
        """Names that must appear given those seen: `required` plus dependentRequired, transitively."""
        req = node.required
        if not node.deps:
            return req
        while True:
            more = req.union(*(node.deps.get(n, ()) for n in seen | req))
            if more == req:
                return req
            req = more

    def _feasible(self, node: ObjectNode, seen: frozenset, nk: int) -> bool:
        need = self._required(node, seen) - seen
        if any(n not in node.props or not self.sat[node.props[n]] for n in need):
            return False
        last = self._last_rank(node, seen)
        if any(node.rank[n] < last for n in need):
            return False   # ordered: a required name was skipped
        missing = len(need)
        if node.max_props is not None and nk + missing > node.max_props:
            return False
        if nk + missing >= node.min_props:
            return True
        if self._others_possible(node):
            return True
        avail = sum(1 for n, v in node.props.items() if n not in seen and self.sat[v] and node.rank[n] > last)
        return nk + avail >= node.min_props

    def _last_rank(self, node: ObjectNode, seen: frozenset) -> int:
        """Ordered mode: schema position of the last named property written (-1: none, or not ordered)."""
        if not self.ordered:
            return -1
        return max((node.rank[n] for n in seen if n in node.rank), default=-1)

    def _others_possible(self, node: ObjectNode) -> bool:
        """Whether some name outside `properties` can have a valid value (additionalProperties or a pattern)."""
        if node.additional is not None and self.sat[node.additional]:
            return True
        return any(self.sat[v] for v in node.pattern_nodes.values())

    def _can_close(self, node: ObjectNode, seen: frozenset, nk: int) -> bool:
        return self._required(node, seen) <= seen and nk >= node.min_props

    def _key_choices(self, node: ObjectNode, seen: frozenset, nk: int) -> tuple[dict, bool] | None:
        """(allowed named properties, whether other names are allowed) for the next property; None if none."""
        if node.max_props is not None and nk + 1 > node.max_props:
            return None
        last = self._last_rank(node, seen)
        named = {n: n for n, v in node.props.items()
                 if n not in seen and node.rank[n] > last and self.sat[v] and self._feasible(node, seen | {n}, nk + 1)}
        extra = self._others_possible(node) and self._feasible(node, seen, nk + 1) and \
            (not self.ordered or self._required(node, seen) <= seen)
        if not named and not extra:
            return None
        return (named, extra)

    def key_dfa(self, nid: int, seen: frozenset, nk: int) -> ByteDFA:
        """DFA for the next property name. When other names are allowed it is one DFA per object (every name
        leads somewhere: a used name can still grow into another name), and `_finish` rejects used names;
        otherwise only the names still allowed, so the model cannot start a name it cannot finish."""
        node = self.nodes[nid]
        if node.patterns:
            return self._pattern_key_dfa(node, seen, nk)
        shared = node.additional is not None and self.sat[node.additional] and node.max_props is None and \
            not self.ordered
        if shared:
            key = "shared"
            dfa = node.key_dfas.get(key)
            if dfa is None:
                dfa = words_dfa({n: n for n in node.props}, EXTRA, canonical=self.whitespace == "compact")
                node.key_dfas[key] = dfa
            return dfa
        key = (seen, nk if node.min_props or node.max_props is not None else 0)
        dfa = node.key_dfas.get(key)
        if dfa is None:
            choices = self._key_choices(node, seen, nk)
            named, extra = choices if choices else ({}, False)
            # names of properties that are not allowed any more must not be taken as "additional" names
            blocked = tuple(n for n in node.props if n not in named) if extra else ()
            dfa = words_dfa(named, EXTRA if extra else None, blocked, canonical=self.whitespace == "compact")
            node.key_dfas[key] = dfa
        return dfa

    def _pattern_key_dfa(self, node: ObjectNode, seen: frozenset, nk: int) -> ByteDFA:
        """Names for an object with patternProperties: the product of the name trie with every pattern, labelled
        (name) or ("*", matched pattern indices); names whose value could never be valid are not accepted."""
        shared = node.additional is not None and node.max_props is None and not self.ordered
        key = "shared" if shared else (seen, nk if node.min_props or node.max_props is not None else 0)
        dfa = node.key_dfas.get(key)
        if dfa is not None:
            return dfa
        if shared:
            named, blocked, extra = {n: n for n in node.props}, (), True
        else:
            choices = self._key_choices(node, seen, nk)
            named, extra = choices if choices else ({}, False)
            blocked = tuple(n for n in node.props if n not in named)
        trie = literal_trie(named, EXTRA if extra else None, blocked)
        pats = list(node.patterns)

        def label(states):
            t = states[0]
            if t not in trie.finals:
                return None
            tl = trie.finals[t]
            if tl is not EXTRA:
                return tl
            matched = frozenset(i for i, (p, s) in enumerate(zip(pats, states[1:])) if s >= 0 and s in p.finals)
            v = node.other_node(matched)
            return ("*", matched) if v is not None and self.sat[v] else None
        from .charfsm import label_product
        fsm = label_product([trie] + pats, label)
        dfa = ByteDFA.from_char_fsm(fsm, json_string=True, canonical=self.whitespace == "compact")
        node.key_dfas[key] = dfa
        return dfa

    def _max_items(self, node: ArrayNode):
        hi = node.max_items
        for i, p in enumerate(node.prefix):
            if not self.sat[p]:
                hi = i if hi is None else min(hi, i)
                break
        else:
            if node.items is None or not self.sat[node.items]:
                lim = len(node.prefix)
                hi = lim if hi is None else min(hi, lim)
        return hi

    # --- masks -------------------------------------------------------------------------------------------------
    def stack_mask(self, stack: Stack) -> np.ndarray:
        """Packed int32 [words] bitmask of text tokens allowed from `stack` (EOS not included). Cached; the
        cache holds ~6 KB per stack and is cleared when it reaches _MASK_CACHE_LIMIT entries."""
        hit = self._masks.get(stack)
        if hit is not None:
            return hit
        top = stack[-1]
        if top[0] == "L" and top[3] >= 0 and self.nodes[top[1]].counted:
            # a string's character count only matters near its bounds: far from them, every count gives the
            # same mask, so it is cached under count -1
            node = self.nodes[top[1]]
            c = top[3]
            if c >= node.min_chars and (node.max_chars is None or
                                        node.max_chars - c >= self._max_need(node.dfa, top[2])):
                far = stack[:-1] + (("L", top[1], top[2], -1),)
                hit = self._masks.get(far)
                if hit is None:
                    hit = self._compute_mask(stack)
                    self._masks[far] = hit
                return hit
        return self._compute_mask(stack)

    def _max_need(self, dfa: ByteDFA, s: int) -> int:
        """Largest character count a token can add from DFA state s (plus what must follow), for caching."""
        key = (dfa.key, s)
        v = self._need.get(key)
        if v is None:
            cls = self.index.classify(dfa, s)
            need = cls.inc + dfa.char_dist[cls.end]
            v = self._need[key] = int(need.max(initial=0)) + self.index.max_depth + 1
        return v

    def _compute_mask(self, stack: Stack) -> np.ndarray:
        mask = np.zeros(self.vocab_size, bool)
        if stack[-1][0] in ("L", "K"):
            self._lexeme_tokens(stack, 0, mask)
            below = self._lexeme_end(stack)
            if below is not None:
                # the lexeme may end right here: every token allowed after it is allowed now
                mask |= self.stack_mask_bool(below)
        else:
            self._walk_trie(stack, mask)
        packed = _pack(mask, self.words)
        with self._lock:
            if len(self._masks) > _MASK_CACHE_LIMIT:
                self._masks.clear()
            self._masks[stack] = packed
        return packed

    def stack_mask_bool(self, stack: Stack) -> np.ndarray:
        """`stack_mask` unpacked to bool [vocab]."""
        return np.unpackbits(self.stack_mask(stack).view(np.uint8), bitorder="little")[:self.vocab_size] \
            .astype(bool)

    def _lexeme_tokens(self, stack: Stack, node: int, mask: np.ndarray) -> None:
        """Set in `mask` the tokens below trie node `node` (its prefix already read into `stack`, whose top is an
        L or K frame) that the lexeme reads at least one more byte of: those it reads wholly, and those it
        leaves part-way whose rest the stack below accepts. (Ending the lexeme right at `node` is the
        caller's business, see `_lexeme_end`.)"""
        top = stack[-1]
        if top[0] == "L":
            lex = self.nodes[top[1]]
            dfa, s, c = lex.dfa, top[2], top[3]
            counted = lex.counted
        else:
            lex, counted, c = None, False, 0
            dfa, s = self.key_dfa(top[1], top[2], top[3]), top[4]
        cls = self.index.classify(dfa, s, node)
        ids = cls.inside
        if counted:
            ok = np.ones(len(ids), bool)
            if lex.max_chars is not None:
                # room must remain for the shortest completion the lexeme DFA still needs
                ok &= cls.inc + dfa.char_dist[cls.end] <= lex.max_chars - c
            if lex.min_chars > c:
                # a token that closes the string must bring it to minLength
                ok &= ~dfa.walk_accepting[cls.end] | (cls.inc >= lex.min_chars - c)
            ids = ids[ok]
        mask[ids] = True
        # tokens that end the lexeme part-way: which of them the stack below accepts does not depend on the
        # lexeme's character count, so it is cached per (dfa state, node, stack below) and only the count is
        # checked here
        for t, dc in self._leaving_ok(stack, node, dfa, s, cls.leaving):
            if counted:
                c2 = c + dc
                if c2 < lex.min_chars or (lex.max_chars is not None and c2 > lex.max_chars):
                    continue
            mask[t] = True

    def _lexeme_end(self, stack: Stack) -> Stack | None:
        """The stack if the top lexeme ends right here (before the next byte); None if it cannot."""
        top = stack[-1]
        if top[0] == "L":
            return stack[:-1] if self.nodes[top[1]].dfa.accepting_list[top[2]] else None
        if self.key_dfa(top[1], top[2], top[3]).accepting_list[top[4]]:
            return self._finish(stack, top[4])
        return None

    def _leaving_ok(self, stack: Stack, node: int, dfa: ByteDFA, s: int, leaving) -> list[tuple[int, int]]:
        """(token, characters before the end) for tokens that end the top lexeme part-way and whose rest the
        stack below accepts. Cached per (dfa, state, node, stack below the lexeme)."""
        key = (dfa.key, s, node, stack[:-1], stack[-1][0] == "K" and stack[-1][1:4])
        hit = self._leaving.get(key)
        if hit is not None:
            return hit
        below_of: dict[int, Stack | None] = {}
        out = []
        for a, rest, toks in leaving:
            if a not in below_of:
                below_of[a] = self._finish(stack, a)
            below = below_of[a]
            if below is not None and self.run((below,), rest):
                out.extend(toks)
        with self._lock:
            if len(self._leaving) > _MASK_CACHE_LIMIT:
                self._leaving.clear()
            self._leaving[key] = out
        return out

    def _finish(self, stack: Stack, s: int) -> Stack | None:
        """The stack after the top lexeme (in accepting DFA state s) ends; None if that name is not allowed
        here (a shared key DFA also knows names already used)."""
        top = stack[-1]
        if top[0] == "L":
            return stack[:-1]
        node = self.nodes[top[1]]
        label = self.key_dfa(top[1], top[2], top[3]).labels[s]
        seen, nk = top[2], top[3]
        if label is EXTRA:
            vnode = node.additional
        elif isinstance(label, tuple):
            vnode = node.other_node(label[1])
        else:
            if label in seen:
                return None
            choices = self._key_choices(node, seen, nk)
            if choices is None or label not in choices[0]:
                return None
            seen = seen | {label}
            vnode = node.props[label]
        return stack[:-2] + (("O", top[1], 1, seen, nk + 1, vnode),)

    def _walk_trie(self, stack: Stack, mask: np.ndarray) -> None:
        """Set in `mask` the tokens allowed from a structural position: depth-first over the vocabulary trie,
        visiting only children whose byte can come next. Where a stack enters a lexeme (L/K on top), the
        tokens that go on inside it come from the lexeme's token classification below that trie node, and
        only the stack after the lexeme (if it may end there) walks on byte by byte."""
        children, ends = self.index.children, self.index.ends
        allowed: list[int] = []
        todo = [(0, [stack])]
        while todo:
            node, stacks = todo.pop()
            struct: list[Stack] = []
            for st in stacks:
                while st is not None and st[-1][0] in ("L", "K"):
                    self._lexeme_tokens(st, node, mask)
                    st = self._lexeme_end(st)
                if st is not None and st not in struct:
                    struct.append(st)
            if not struct:
                continue
            nb: set[int] = set()
            for st in struct:
                nb |= self.next_bytes(st)
            bases = [node]
            if self.ws and all(st[-1][0] in ("V", "O", "A") for st in struct):
                # whitespace leaves these stacks as they are: take every run of it below `node` at once
                bases = self.index.ws_closure(node)
                for w in bases[1:]:
                    allowed.extend(ends[w])
                nb -= self.ws
            for b in nb:
                nxt = None
                for n in bases:
                    child = children[n].get(b)
                    if child is None:
                        continue
                    if nxt is None:
                        nxt = self.run(struct, bytes((b,)))
                        if not nxt:
                            break
                    allowed.extend(ends[child])
                    if children[child]:
                        todo.append((child, nxt))
        mask[allowed] = True

    def next_bytes(self, stack: Stack) -> set[int]:
        """Bytes that may come next from `stack` (exact: each candidate is checked with `step`). Cached."""
        hit = self._next.get(stack)
        if hit is None:
            hit = frozenset(b for b in self._candidates(stack) if self.step(stack, b))
            if len(self._next) > _MASK_CACHE_LIMIT:
                self._next.clear()
            self._next[stack] = hit
        return hit

    def _candidates(self, stack: Stack) -> set[int]:
        top = stack[-1]
        k = top[0]
        if k == "L":
            dfa = self.nodes[top[1]].dfa
            out = {b for b, t in enumerate(dfa.table_list[top[2]]) if t >= 0}
            if dfa.accepting_list[top[2]]:
                out |= self._candidates(stack[:-1])
            return out
        if k == "K":
            dfa = self.key_dfa(top[1], top[2], top[3])
            out = {b for b, t in enumerate(dfa.table_list[top[4]]) if t >= 0}
            if dfa.accepting_list[top[4]]:
                out |= set(self.ws) | {0x3A}
            return out
        if k == "V":
            return set(self.ws) | self._first(top[1], set())
        if k == "O":
            return set(self.ws) | {0x22, 0x7D, 0x3A, 0x2C}
        if k == "A":
            node = self.nodes[top[1]]
            out = set(self.ws) | {0x2C, 0x5D}
            for p in list(node.prefix) + ([node.items] if node.items is not None else []):
                out |= self._first(p, set())
            return out
        return set()

    def _first(self, nid: int, visiting: set) -> set[int]:
        if nid in visiting:
            return set()
        visiting.add(nid)
        node = self.nodes[nid]
        if isinstance(node, LexNode):
            return {b for b, t in enumerate(node.dfa.table_list[node.dfa.start]) if t >= 0}
        if isinstance(node, ObjectNode):
            return {0x7B}
        if isinstance(node, ArrayNode):
            return {0x5B}
        if isinstance(node, UnionNode):
            out: set[int] = set()
            for a in node.alts:
                out |= self._first(a, visiting)
            return out
        return set()


def _pack(mask: np.ndarray, words: int) -> np.ndarray:
    bits = np.packbits(mask, bitorder="little")
    if bits.size < words * 4:
        bits = np.concatenate([bits, np.zeros(words * 4 - bits.size, np.uint8)])
    return bits.view("<i4").astype(np.int32, copy=False)


def _satisfiable(nodes: list[Node]) -> list[bool]:
    """Least fixpoint: a node is satisfiable if some finite value matches it."""
    sat = [False] * len(nodes)
    changed = True
    while changed:
        changed = False
        for i, n in enumerate(nodes):
            if sat[i]:
                continue
            if isinstance(n, LexNode):
                ok = not n.dfa.is_empty() and (n.max_chars is None or n.min_chars <= n.max_chars)
            elif isinstance(n, ObjectNode):
                ok = all(r in n.props and sat[n.props[r]] for r in n.required) and \
                    (n.max_props is None or len(n.required) <= n.max_props) and \
                    (len(n.required) >= n.min_props or (n.additional is not None and sat[n.additional]) or
                     any(sat[v] for v in n.pattern_nodes.values()) or
                     sum(1 for v in n.props.values() if sat[v]) >= n.min_props)
                if ok and n.additional is None and any(r not in n.props for r in n.required):
                    ok = False
            elif isinstance(n, ArrayNode):
                need = n.min_items
                ok = n.max_items is None or need <= n.max_items
                for j in range(need):
                    item = n.item(j)
                    if item is None or not sat[item]:
                        ok = False
                        break
            elif isinstance(n, UnionNode):
                ok = any(sat[a] for a in n.alts)
            else:
                ok = False
            if ok:
                sat[i] = True
                changed = True
    return sat
