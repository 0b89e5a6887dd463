"""The pushdown parser of a compiled grammar, one byte at a time, over stacks of frames (frames.py)."""
from __future__ import annotations

from typing import Iterable

from ..cache import CacheBudget, LruCache
from ..ir.nodes import ArrayNode, LexNode, Node, ObjectNode, UnionNode
from .frames import (ARR_COMMA, ARR_ITEM, ARR_OPEN, OBJ_COMMA, OBJ_NAMED, OBJ_OPEN, OBJ_VALUED, RAN, Arr, End,
                     Key, Lex, Obj, Ran, Stack, Value)
from .object_keys import ObjectKeys

_UNKNOWN = object()


class Parser:
    """Stepping over stacks of frames. Immutable apart from its caches: `next_bytes` (an LruCache), and the
    frames most bytes create (Lex without a character count, Key, Value), made once per (node, DFA state) and
    shared: building a NamedTuple costs ~5x a plain tuple, and shared frames compare by identity."""

    def __init__(self, nodes: list[Node], sat: list[bool], ws: frozenset, keys: ObjectKeys,
                 separator: int | None, ws_run: int | None, caches: CacheBudget):
        # whitespace (see GrammarIR): `ws` bytes are skipped anywhere, unbounded; `separator` is a lexeme read
        # after every ':' and ','; a byte of `run_bytes` at a structural position inside the root value enters
        # the `ws_run` lexeme, which no second run may follow
        self.nodes, self.sat, self.ws, self.keys = nodes, sat, ws, keys
        self.separator, self.ws_run = separator, ws_run
        self.run_bytes = frozenset(nodes[ws_run].dfa.live_bytes(nodes[ws_run].dfa.start)) \
            if ws_run is not None else frozenset()
        # per stack, charged to `caches` (the grammar's index's budget)
        self._next = LruCache(caches, "next bytes")
        self._ways: dict[tuple[int, int, int], list] = {}   # counted arrays: (node, index, count) -> item ways
        # per node id, filled on first use: Lex frames (nchars 0) / Key frames by DFA state; the Value frame
        self._lex: list[list | None] = [None] * len(nodes)
        self._key: list[list | None] = [None] * len(nodes)
        self._value: list[Value | None] = [None] * len(nodes)
        self._starts = LruCache(caches, "value starts")    # (node, byte) -> see _start_tails
        self._firsts: dict[int, frozenset] = {}                     # node -> see _first

    def lex_frame(self, nid: int, state: int) -> Lex:
        """The shared frame at DFA `state` of LexNode `nid`, no characters counted."""
        frames = self._lex[nid]
        if frames is None:
            frames = self._lex[nid] = [None] * self.nodes[nid].dfa.num_states
        f = frames[state]
        if f is None:
            f = frames[state] = Lex(nid, state, 0)
        return f

    def key_frame(self, nid: int, state: int) -> Key:
        """The shared frame at key-DFA `state` of ObjectNode `nid`."""
        frames = self._key[nid]
        if frames is None:
            frames = self._key[nid] = [None] * self.keys.dfa(nid).num_states
        f = frames[state]
        if f is None:
            f = frames[state] = Key(nid, state)
        return f

    def value_frame(self, nid: int) -> Value:
        """The shared frame expecting a value of node `nid`."""
        f = self._value[nid]
        if f is None:
            f = self._value[nid] = Value(nid)
        return f

    def step(self, stack: Stack, b: int) -> list[Stack]:
        """All stacks reachable from `stack` by consuming byte `b` (empty: rejected)."""
        top = stack[-1]
        k = type(top)
        rest = stack[:-1]
        if k is Lex:
            nid = top.node
            node = self.nodes[nid]
            dfa = node.dfa
            s = top.state
            out = []
            ns = dfa.table_list[s][b]
            if ns >= 0:
                if node.counted:
                    c = top.nchars
                    if dfa.count_rows[s][b]:
                        c += 1
                        if node.max_chars is None:
                            c = min(c, node.min_chars)
                    # room for the fewest counts still needed; where no count can come any more, the least met
                    if (node.max_chars is None or c + dfa.char_dist[ns] <= node.max_chars) and \
                            (not dfa.frozen_list[ns] or c >= node.min_chars):
                        out.append(rest + (Lex(nid, ns, c),))
                else:
                    frames = self._lex[nid]     # lex_frame(nid, ns), its common case inlined: the hottest line
                    f = frames[ns] if frames is not None else None
                    out.append(rest + (f if f is not None else self.lex_frame(nid, ns),))
            if dfa.accepting_list[s] and top.nchars >= node.min_chars:
                out.extend(self.step(rest if nid != self.ws_run else rest + (RAN,), b))
            return out
        if k is Key:
            nid = top.node
            dfa = self.keys.dfa(nid)
            s = top.state
            ns = dfa.table_list[s][b]
            obj = rest[-1]
            if ns >= 0 and self.keys.allowed_states(nid, obj.seen, obj.nkeys)[1][ns]:
                if top.name:                # a tracked name (unique keys): not one already in the object
                    name = top.name + bytes((b,))
                    return [] if dfa.accepting_list[ns] and name in obj.seen else [rest + (Key(nid, ns, name),)]
                frames = self._key[nid]     # key_frame(nid, ns), its common case inlined
                f = frames[ns] if frames is not None else None
                return [rest + (f if f is not None else self.key_frame(nid, ns),)]
            if dfa.accepting_list[s]:
                below = self.finish(stack, s)
                return self.step(below, b) if below is not None else []
            return []
        if k is Value:
            if b in self.ws:
                return [stack]
            if b in self.run_bytes and len(stack) > 2:
                return self._enter_run(stack, b)
            return self._start_value(rest, top.node, b)
        if k is Obj:
            return self._step_object(stack, b)
        if k is Arr:
            return self._step_array(stack, b)
        if k is Ran:
            return [] if b in self.run_bytes else self.step(rest, b)
        return [stack] if b in top.ws else []   # End: trailing whitespace where it is allowed, nothing else

    def _step_object(self, stack: Stack, b: int) -> list[Stack]:
        top, rest = stack[-1], stack[:-1]
        nid, phase, seen, nk = top.node, top.phase, top.seen, top.nkeys
        if b in self.ws:
            return [stack]
        if b in self.run_bytes:
            return self._enter_run(stack, b)
        if (phase == OBJ_OPEN or phase == OBJ_COMMA) and b == 0x22:
            dfa = self.keys.dfa(nid)
            ns = dfa.table_list[dfa.start][b]
            if ns >= 0 and self.keys.allowed_states(nid, seen, nk)[1][ns]:
                return [stack + (Key(nid, ns, b'"') if self.keys.tracks_names(nid) else self.key_frame(nid, ns),)]
            return []
        if (phase == OBJ_OPEN or phase == OBJ_VALUED) and b == 0x7D:    # '}'
            return [rest] if self.keys.can_close(self.nodes[nid], seen, nk) else []
        if phase == OBJ_NAMED and b == 0x3A:                              # ':'
            return [self._separated(rest + (Obj(nid, OBJ_VALUED, seen, nk), self.value_frame(top.value)))]
        if phase == OBJ_VALUED and b == 0x2C:                             # ','
            return [self._separated(rest + (Obj(nid, OBJ_COMMA, seen, nk),))] \
                if self.keys.choices(nid, seen, nk) else []
        return []

    def _step_array(self, stack: Stack, b: int) -> list[Stack]:
        top, rest = stack[-1], stack[:-1]
        phase, i = top.phase, top.index
        if b in self.ws:
            return [stack]
        if b in self.run_bytes:
            return self._enter_run(stack, b)
        node = self.nodes[top.node]
        if node.counts:
            return self._step_counted(stack, b)
        hi = self._max_items(node)
        if phase == ARR_ITEM:
            if b == 0x2C:
                return [self._separated(rest + (Arr(top.node, ARR_COMMA, i),))] if (hi is None or i < hi) else []
            if b == 0x5D:
                return [rest] if i >= node.min_items else []
            return []
        if phase == ARR_OPEN and b == 0x5D:
            return [rest] if node.min_items == 0 else []
        if hi is not None and i >= hi:
            return []
        return self._start_value(rest + (Arr(top.node, ARR_ITEM, node.next_index(i)),), node.item(i), b)

    def _step_counted(self, stack: Stack, b: int) -> list[Stack]:
        """_step_array for a node counting `contains` matches: each item forks into a hit (count + 1) and a miss;
        only ways that can still end validly (ArrayNode.completable) are kept, so no stack is a dead end."""
        top, rest = stack[-1], stack[:-1]
        nid, phase, i, c = top.node, top.phase, top.index, top.matched
        node = self.nodes[nid]
        if b == 0x5D:
            ok = phase != ARR_COMMA and i >= node.min_items and c >= node.min_contains
            return [rest] if ok else []
        ways = self._item_ways(nid, i, c)
        if phase == ARR_ITEM:
            return [self._separated(rest + (Arr(nid, ARR_COMMA, i, c),))] if b == 0x2C and ways else []
        out = []
        for item, c2 in ways:
            for st in self._start_value(rest + (Arr(nid, ARR_ITEM, node.next_index(i), c2),), item, b):
                if st not in out:
                    out.append(st)
        return out

    def _item_ways(self, nid: int, i: int, c: int) -> list[tuple[int, int]]:
        """(node, count after) for item i of counted array `nid` with c hits, each leaving it completable."""
        key = (nid, i, c)
        hit = self._ways.get(key)
        if hit is None:
            node = self.nodes[nid]
            if node.max_items is not None and i >= node.max_items:
                hit = []
            else:
                hit = [(item, c2) for item, c2 in node.counted_items(i, c)
                       if self.sat[item] and node.completable(self.sat, node.next_index(i), c2)]
            self._ways[key] = hit
        return hit

    def _separated(self, stack: Stack) -> Stack:
        """`stack` right after a ':' or ',', with the separator lexeme to read first if there is one."""
        if self.separator is None:
            return stack
        return stack + (self.lex_frame(self.separator, self.nodes[self.separator].dfa.start),)

    def _enter_run(self, stack: Stack, b: int) -> list[Stack]:
        """`stack` (structural on top) after byte `b` starts a whitespace run."""
        return self.step(stack + (self.lex_frame(self.ws_run, self.nodes[self.ws_run].dfa.start),), b)

    def _start_value(self, below: Stack, nid: int, b: int, visiting: frozenset = frozenset()) -> list[Stack]:
        if not visiting:
            key = (nid, b)
            tails = self._starts.get(key, _UNKNOWN)
            if tails is _UNKNOWN:
                tails = self._start_tails(nid, b, frozenset())
                self._starts[key] = tails
            if tails is not None:
                return [below + t for t in tails]
        if not self.sat[nid] or nid in visiting:   # `visiting`: unions that refer back to themselves
            return []
        node = self.nodes[nid]
        if isinstance(node, LexNode):
            return self.step(below + (self.lex_frame(nid, node.dfa.start),), b)
        if isinstance(node, ObjectNode):
            return [below + (Obj(nid, OBJ_OPEN, frozenset(), 0),)] if b == 0x7B else []
        if isinstance(node, ArrayNode):
            return [below + (Arr(nid, ARR_OPEN, 0),)] if b == 0x5B else []
        if isinstance(node, UnionNode):
            out = []
            for a in node.alts:
                for s in self._start_value(below, a, b, visiting | {nid}):
                    if s not in out:
                        out.append(s)
            return out
        return []

    def _start_tails(self, nid: int, b: int, visiting: frozenset) -> tuple[tuple, ...] | None:
        """The frames `_start_value(below, nid, b)` puts on any `below`, as tuples in its order; None where they
        depend on `below` (a lexeme that may be empty ends before `b`, which `below` then reads)."""
        if not self.sat[nid] or nid in visiting:
            return ()
        node = self.nodes[nid]
        if isinstance(node, LexNode):
            if node.dfa.accepting_list[node.dfa.start]:
                return None
            return tuple(self.step((self.lex_frame(nid, node.dfa.start),), b))
        if isinstance(node, ObjectNode):
            return ((Obj(nid, OBJ_OPEN, frozenset(), 0),),) if b == 0x7B else ()
        if isinstance(node, ArrayNode):
            return ((Arr(nid, ARR_OPEN, 0),),) if b == 0x5B else ()
        if isinstance(node, UnionNode):
            out: list[tuple] = []
            for a in node.alts:
                tails = self._start_tails(a, b, visiting | {nid})
                if tails is None:
                    return None
                out.extend(t for t in tails if t not in out)
            return tuple(out)
        return ()

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
            if type(top) is End:
                return True
            if type(top) is not Lex:
                return False
            node = self.nodes[top.node]
            if not node.dfa.accepting_list[top.state] or top.nchars < node.min_chars:
                return False
            stack = stack[:-1]

    # --- lexeme ends -------------------------------------------------------------------------------------------
    def lexeme_end(self, stack: Stack) -> Stack | None:
        """The stack after its top lexeme (Lex or Key frame) if it ends right here, before the next byte; None if
        it cannot."""
        top = stack[-1]
        if type(top) is Lex:
            node = self.nodes[top.node]
            ok = node.dfa.accepting_list[top.state] and top.nchars >= node.min_chars
            return self.finish(stack, top.state) if ok else None
        return self.finish(stack, top.state) if self.keys.dfa(top.node).accepting_list[top.state] else None

    def finish(self, stack: Stack, s: int, name: bytes | None = None) -> Stack | None:
        """The stack after the top lexeme ends in accepting DFA state s; None if that name is not allowed.
        `name`: a Key's name as recorded (default: the frame's own; b"" records none, for a caller that checks
        what depends on it itself, see StackMasks._leaving_ok)."""
        top = stack[-1]
        if type(top) is Lex:
            return stack[:-1] if top.node != self.ws_run else stack[:-1] + (RAN,)
        obj = stack[-2]
        done = self.keys.finish(top.node, obj.seen, obj.nkeys, s, top.name if name is None else name)
        if done is None:
            return None
        seen, value = done
        return stack[:-2] + (Obj(top.node, OBJ_NAMED, seen, obj.nkeys + 1, value),)

    # --- next bytes --------------------------------------------------------------------------------------------
    def next_bytes(self, stack: Stack) -> frozenset:
        """Bytes that may come next from `stack` (exact: each candidate is checked with `step`). Cached."""
        hit = self._next.get(stack)
        if hit is None:
            top = stack[-1]
            node = self.nodes[top.node] if type(top) is Lex else None
            if node is not None and not node.counted:
                # `step` reads every live byte of the lexeme, and where it may end, what the stack after it reads
                hit = frozenset(node.dfa.live_bytes(top.state))
                if node.dfa.accepting_list[top.state]:
                    hit |= self.next_bytes(stack[:-1] if top.node != self.ws_run else stack[:-1] + (RAN,))
            else:
                hit = frozenset(b for b in self._candidates(stack) if self.step(stack, b))
            hit = self._next.put(stack, hit)
        return hit

    def _candidates(self, stack: Stack) -> set[int]:
        top = stack[-1]
        k = type(top)
        if k is Lex:
            dfa = self.nodes[top.node].dfa
            out = set(dfa.live_bytes(top.state))
            if dfa.accepting_list[top.state]:
                out |= self._candidates(stack[:-1])
            return out
        if k is Key:
            dfa = self.keys.dfa(top.node)
            out = set(dfa.live_bytes(top.state))
            if dfa.accepting_list[top.state]:
                out |= set(self.ws) | self.run_bytes | {0x3A}
            return out
        if k is Value:
            return set(self.ws) | self.run_bytes | self._first_bytes(top.node)
        if k is Obj:
            return set(self.ws) | self.run_bytes | {0x22, 0x7D, 0x3A, 0x2C}
        if k is Arr:
            node = self.nodes[top.node]
            out = set(self.ws) | self.run_bytes | {0x2C, 0x5D}
            for p in list(node.prefix) + ([node.items] if node.items is not None else []) + \
                    [n for n in node.hits + node.misses if n is not None]:
                out |= self._first_bytes(p)
            return out
        if k is Ran:
            return self._candidates(stack[:-1]) - self.run_bytes
        return set(top.ws)     # End

    def _first_bytes(self, nid: int) -> frozenset:
        """Bytes a value of node `nid` may start with (`_first`). Cached."""
        hit = self._firsts.get(nid)
        if hit is None:
            hit = self._firsts[nid] = frozenset(self._first(nid, set()))
        return hit

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
