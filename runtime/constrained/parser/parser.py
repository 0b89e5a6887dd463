"""The pushdown parser of a compiled grammar, one byte at a time.

Parse state is a tuple of stacks (nondeterminism from `anyOf` keeps several); a stack is a tuple of frames,
bottom first:
    ("E",)                              end of input: nothing but EOS may follow
    ("V", node)                         a value of `node` is expected (leading whitespace allowed)
    ("L", node, dfa_state, nchars)      inside a lexeme of LexNode `node`
    ("K", node, seen, nkeys, dfa_state) inside a property name of ObjectNode `node` (its one key DFA)
    ("O", node, phase, seen, nkeys, value_node)   object; phase 0 after '{', 1 after a name, 2 after a value,
                                                  3 after ','
    ("A", node, phase, index)           array; phase 0 after '[', 1 after an item, 2 after ','
An L frame is always on top of a structural frame (V's place), a K frame on top of its O frame."""
from __future__ import annotations

from typing import Iterable

from ..ir.nodes import ArrayNode, LexNode, Node, ObjectNode, UnionNode
from .object_keys import ObjectKeys

Stack = tuple
_CACHE_LIMIT = 8_192


class Parser:
    """Stepping over stacks of frames. Immutable apart from the `next_bytes` cache, which only grows."""

    def __init__(self, nodes: list[Node], sat: list[bool], ws: frozenset, keys: ObjectKeys):
        self.nodes, self.sat, self.ws, self.keys = nodes, sat, ws, keys
        self._next: dict[Stack, frozenset] = {}

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
            dfa = self.keys.dfa(top[1])
            s = top[4]
            ns = dfa.table_list[s][b]
            if ns >= 0 and self.keys.allowed_states(top[1], top[2], top[3])[1][ns]:
                return [rest + (("K", top[1], top[2], top[3], ns),)]
            if dfa.accepting_list[s]:
                below = self.finish(stack, s)
                return self.step(below, b) if below is not None else []
            return []
        if k == "V":
            if b in self.ws:
                return [stack]
            return self._start_value(rest, top[1], b)
        if k == "O":
            return self._step_object(stack, b)
        if k == "A":
            return self._step_array(stack, b)
        return []   # "E": nothing may follow the value

    def _step_object(self, stack: Stack, b: int) -> list[Stack]:
        top, rest = stack[-1], stack[:-1]
        nid, phase, seen, nk = top[1], top[2], top[3], top[4]
        if b in self.ws:
            return [stack]
        if phase in (0, 3) and b == 0x22:
            dfa = self.keys.dfa(nid)
            ns = dfa.table_list[dfa.start][b]
            if ns >= 0 and self.keys.allowed_states(nid, seen, nk)[1][ns]:
                return [stack + (("K", nid, seen, nk, ns),)]
            return []
        if (phase == 0 or phase == 2) and b == 0x7D:   # '}'
            return [rest] if self.keys.can_close(self.nodes[nid], seen, nk) else []
        if phase == 1 and b == 0x3A:                     # ':'
            return [rest + (("O", nid, 2, seen, nk, -1), ("V", top[5]))]
        if phase == 2 and b == 0x2C:                     # ','
            return [rest + (("O", nid, 3, seen, nk, -1),)] if self.keys.choices(nid, seen, nk) else []
        return []

    def _step_array(self, stack: Stack, b: int) -> list[Stack]:
        top, rest = stack[-1], stack[:-1]
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
            if not self.nodes[top[1]].dfa.accepting_list[top[2]]:
                return False
            stack = stack[:-1]

    # --- lexeme ends -------------------------------------------------------------------------------------------
    def lexeme_end(self, stack: Stack) -> Stack | None:
        """The stack if its top lexeme (L or K frame) ends right here, before the next byte; None if it cannot."""
        top = stack[-1]
        if top[0] == "L":
            return stack[:-1] if self.nodes[top[1]].dfa.accepting_list[top[2]] else None
        return self.finish(stack, top[4]) if self.keys.dfa(top[1]).accepting_list[top[4]] else None

    def finish(self, stack: Stack, s: int) -> Stack | None:
        """The stack after the top lexeme ends in accepting DFA state s; None if that name is not allowed."""
        top = stack[-1]
        if top[0] == "L":
            return stack[:-1]
        done = self.keys.finish(top[1], top[2], top[3], s)
        if done is None:
            return None
        return stack[:-2] + (("O", top[1], 1, done[0], top[3] + 1, done[1]),)

    # --- next bytes --------------------------------------------------------------------------------------------
    def next_bytes(self, stack: Stack) -> frozenset:
        """Bytes that may come next from `stack` (exact: each candidate is checked with `step`). Cached."""
        hit = self._next.get(stack)
        if hit is None:
            hit = frozenset(b for b in self._candidates(stack) if self.step(stack, b))
            if len(self._next) > _CACHE_LIMIT:
                self._next.clear()
            self._next[stack] = hit
        return hit

    def _candidates(self, stack: Stack) -> set[int]:
        top = stack[-1]
        k = top[0]
        if k == "L":
            dfa = self.nodes[top[1]].dfa
            out = set(dfa.live_bytes(top[2]))
            if dfa.accepting_list[top[2]]:
                out |= self._candidates(stack[:-1])
            return out
        if k == "K":
            dfa = self.keys.dfa(top[1])
            out = set(dfa.live_bytes(top[4]))
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
            return set(node.dfa.live_bytes(node.dfa.start))
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
