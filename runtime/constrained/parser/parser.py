"""The pushdown parser of a compiled grammar, one byte at a time, over stacks of frames (frames.py)."""
from __future__ import annotations

from typing import Iterable

from ..cache import CacheBudget, LruCache
from ..errors import GrammarError
from ..ir.grammar_ir import GrammarIR
from ..ir.nodes import ArrayNode, LexNode, ObjectNode, SeqNode, UnionNode
from .frames import (ARR_COMMA, ARR_ITEM, ARR_OPEN, OBJ_COMMA, OBJ_NAMED, OBJ_OPEN, OBJ_VALUED, RAN, Arr, End,
                     Key, Lex, Obj, Ran, Seq, Stack, Value)
from .object_keys import ObjectKeys

_UNKNOWN = object()
MAX_STACKS = 20_000     # parse stacks alive at once; past this a grammar is too ambiguous to run


class Parser:
    """Stepping over stacks of frames. Immutable apart from its caches: `next_bytes` (an LruCache), and the
    frames most bytes create (Lex without a character count, Key, Value), made once per (node, DFA state) and
    shared: building a NamedTuple costs ~5x a plain tuple, and shared frames compare by identity."""

    def __init__(self, ir: GrammarIR, keys: ObjectKeys, caches: CacheBudget):
        # whitespace (see GrammarIR): `ws` bytes are skipped at JSON's structural frames, unbounded; `separator`
        # is a lexeme read after every ':' and ','; a byte of `run_bytes` at a structural position inside the
        # root value enters the `ws_run` lexeme, which no second run may follow; an `ignore` lexeme may start at
        # every Seq and End frame (a grammar from rules), as often as it comes
        nodes = self.nodes = ir.nodes
        self.sat, self.nullable, self.ws, self.keys = ir.satisfiable, ir.nullable, ir.whitespace, keys
        ws_run = self.ws_run = ir.ws_run
        self.separator, self.ignore = ir.separator, ir.ignore
        self.run_bytes = frozenset(nodes[ws_run].dfa.live_bytes(nodes[ws_run].dfa.start)) \
            if ws_run is not None else frozenset()
        self.ignore_bytes = frozenset(b for i in self.ignore for b in nodes[i].dfa.live_bytes(nodes[i].dfa.start))
        # per SeqNode: whether its items from each position on may all be empty (the Seq frame may give way)
        self.rest_nullable = {i: tuple(all(self.nullable[x] for x in n.items[p:]) for p in range(len(n.items) + 1))
                              for i, n in enumerate(nodes) if isinstance(n, SeqNode)}
        # per stack, charged to `caches` (the grammar's index's budget)
        self._next = LruCache(caches, "next bytes")
        self._ways: dict[tuple[int, int, int], list] = {}   # counted arrays: (node, index, count) -> item ways
        # per node id, filled on first use: Lex frames (nchars 0) / Key frames by DFA state; the Value frame
        self._lex: list[list | None] = [None] * len(nodes)
        self._key: list[list | None] = [None] * len(nodes)
        self._value: list[Value | None] = [None] * len(nodes)
        self._seq: dict[tuple[int, int], Seq] = {}     # (SeqNode, position) -> its shared frame
        self._starts = LruCache(caches, "value starts")    # (node, byte) -> see _start_tails
        self._expand = LruCache(caches, "expansions")      # stack -> see expand
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

    def seq_frame(self, nid: int, pos: int) -> Seq:
        """The shared frame at item `pos` of SeqNode `nid`."""
        f = self._seq.get((nid, pos))
        if f is None:
            f = self._seq[(nid, pos)] = Seq(nid, pos)
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
        if k is Seq:
            out = self._start_item(rest, top.node, top.pos, b)
            if b in self.ignore_bytes:
                out.extend(s for s in self._enter_ignore(stack, b) if s not in out)
            return out
        if k is Ran:
            return [] if b in self.run_bytes else self.step(rest, b)
        # End: trailing whitespace where it is allowed, ignored lexemes, nothing else
        if b in self.ignore_bytes:
            return self._enter_ignore(stack, b)
        return [stack] if b in top.ws else []

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

    def _enter_ignore(self, stack: Stack, b: int) -> list[Stack]:
        """`stack` (a Seq or End on top) after byte `b` starts one of the ignored lexemes."""
        out: list[Stack] = []
        for i in self.ignore:
            for s in self.step(stack + (self.lex_frame(i, self.nodes[i].dfa.start),), b):
                if s not in out:
                    out.append(s)
        return out

    def _start_item(self, below: Stack, nid: int, pos: int, b: int, visiting: frozenset = frozenset()
                    ) -> list[Stack]:
        """The stacks after byte `b` starts item `pos` of SeqNode `nid` on `below` (the Seq frame of the items
        after it pushed unless it is the last: a tail call)."""
        items = self.nodes[nid].items
        if pos == len(items):
            return self.step(below, b)      # (only when the node has no items at all)
        return self._start_value(self._under_item(below, nid, pos), items[pos], b, visiting)

    def _under_item(self, below: Stack, nid: int, pos: int) -> Stack:
        """`below` with the Seq frame of the items after item `pos` of SeqNode `nid`, unless it is the last."""
        return below + (self.seq_frame(nid, pos + 1),) if pos + 1 < len(self.nodes[nid].items) else below

    def _enter_run(self, stack: Stack, b: int) -> list[Stack]:
        """`stack` (structural on top) after byte `b` starts a whitespace run."""
        return self.step(stack + (self.lex_frame(self.ws_run, self.nodes[self.ws_run].dfa.start),), b)

    def _start_value(self, below: Stack, nid: int, b: int, visiting: frozenset = frozenset()) -> list[Stack]:
        """The stacks after byte `b` starts a value of node `nid` on `below` (or, where the value may be empty,
        `below` reads `b`)."""
        if not visiting:
            key = (nid, b)
            hit = self._starts.get(key, _UNKNOWN)
            if hit is _UNKNOWN:
                hit = self._start_tails(nid, b, frozenset())
                self._starts[key] = hit
            if hit is not None:
                tails, falls = hit
                out = [below + t for t in tails]
                if falls:
                    out.extend(s for s in self.step(below, b) if s not in out)
                return out
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
        if isinstance(node, SeqNode):
            return self._start_item(below, nid, 0, b, visiting | {nid})
        return []

    def _start_tails(self, nid: int, b: int, visiting: frozenset) -> tuple[tuple, bool] | None:
        """(the frames `_start_value(below, nid, b)` puts on any `below` by reading `b` inside the value, as
        tuples; whether the value may be empty, so that `below` reads `b` too); None where that is not known
        without `below` (a counted lexeme that may be empty)."""
        if not self.sat[nid] or nid in visiting:
            return (), False
        node = self.nodes[nid]
        if isinstance(node, LexNode):
            dfa = node.dfa
            if not dfa.accepting_list[dfa.start]:
                return tuple(self.step((self.lex_frame(nid, dfa.start),), b)), False
            if node.counted:
                return None
            ns = dfa.table_list[dfa.start][b]
            return (((self.lex_frame(nid, ns),),) if ns >= 0 else ()), True
        if isinstance(node, ObjectNode):
            return (((Obj(nid, OBJ_OPEN, frozenset(), 0),),) if b == 0x7B else ()), False
        if isinstance(node, ArrayNode):
            return (((Arr(nid, ARR_OPEN, 0),),) if b == 0x5B else ()), False
        if isinstance(node, UnionNode):
            out: list[tuple] = []
            falls = False
            for a in node.alts:
                hit = self._start_tails(a, b, visiting | {nid})
                if hit is None:
                    return None
                out.extend(t for t in hit[0] if t not in out)
                falls = falls or hit[1]
            return tuple(out), falls
        if isinstance(node, SeqNode):
            out = []
            for pos, item in enumerate(node.items):
                hit = self._start_tails(item, b, visiting | {nid})
                if hit is None:
                    return None
                under = self._under_item((), nid, pos)
                out.extend(under + t for t in hit[0] if under + t not in out)
                if not hit[1]:
                    return tuple(out), False
            return tuple(out), True
        return (), False

    # --- expansions ---------------------------------------------------------------------------------------------
    def expand(self, stack: Stack) -> tuple[Stack, ...] | None:
        """The stacks a Seq or End on top of `stack` reaches without reading a byte, each with a lexeme at its
        DFA's start on top: every byte `stack` reads is one of theirs first (the mask engine classifies tokens
        from them). None where `stack` reads bytes otherwise (a JSON value starts, End's trailing whitespace).
        Cached."""
        hit = self._expand.get(stack, _UNKNOWN)
        if hit is _UNKNOWN:
            out: list[Stack] = []
            hit = self._expand.put(stack, tuple(dict.fromkeys(out)) if self._expand_into(stack, out) else None)
        return hit

    def _expand_into(self, stack: Stack, out: list) -> bool:
        top, rest = stack[-1], stack[:-1]
        k = type(top)
        if k is not Seq and (k is not End or top.ws):
            return False
        out.extend(stack + (self.lex_frame(i, self.nodes[i].dfa.start),) for i in self.ignore)
        if k is End:
            return True
        if not self._expand_items(rest, top.node, top.pos, out, frozenset()):
            return False
        return self._expand_into(rest, out) if self.rest_nullable[top.node][top.pos] else True

    def _expand_items(self, below: Stack, nid: int, pos: int, out: list, visiting: frozenset) -> bool:
        """`_expand_node` for items `pos`, ... of SeqNode `nid` on `below`, up to the first that cannot be
        empty (whether they all can is `rest_nullable`)."""
        items = self.nodes[nid].items
        for p in range(pos, len(items)):
            if not self._expand_node(self._under_item(below, nid, p), items[p], out, visiting):
                return False
            if not self.nullable[items[p]]:
                break
        return True

    def _expand_node(self, under: Stack, nid: int, out: list, visiting: frozenset) -> bool:
        """Adds to `out` the stacks starting a lexeme of a value of `nid` on `under` (where the value may be
        empty, the caller goes on after it); False where a value of `nid` may start otherwise."""
        if not self.sat[nid] or nid in visiting:
            return True
        node = self.nodes[nid]
        if isinstance(node, LexNode):
            if node.counted and node.dfa.accepting_list[node.dfa.start]:
                return False
            if node.dfa.live_bytes(node.dfa.start):
                out.append(under + (self.lex_frame(nid, node.dfa.start),))
            return True
        if isinstance(node, UnionNode):
            return all(self._expand_node(under, a, out, visiting | {nid}) for a in node.alts)
        if isinstance(node, SeqNode):
            return self._expand_items(under, nid, 0, out, visiting | {nid})
        return not isinstance(node, (ObjectNode, ArrayNode))

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
            if len(nxt) > MAX_STACKS:
                raise GrammarError(f"the grammar keeps more than {MAX_STACKS} parses alive: too ambiguous to run")
            cur = nxt
        return cur

    def accepting(self, stack: Stack) -> bool:
        """Whether the input may end here (EOS allowed)."""
        while True:
            top = stack[-1]
            k = type(top)
            if k is End:
                return True
            if k is Seq:
                if not self.rest_nullable[top.node][top.pos]:
                    return False
            elif k is not Lex:
                return False
            else:
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
            starts = self.expand(stack) if type(top) is Seq or type(top) is End else None
            if node is not None and not node.counted:
                # `step` reads every live byte of the lexeme, and where it may end, what the stack after it reads
                hit = frozenset(node.dfa.live_bytes(top.state))
                if node.dfa.accepting_list[top.state]:
                    hit |= self.next_bytes(stack[:-1] if top.node != self.ws_run else stack[:-1] + (RAN,))
            elif starts is not None:
                # a sequence or the end reads through the lexemes it starts: their live bytes at their start
                hit = frozenset(b for e in starts for b in self.nodes[e[-1].node].dfa.live_bytes(e[-1].state))
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
        if k is Seq:
            out = set(self.ignore_bytes)
            for x in self.nodes[top.node].items[top.pos:]:
                out |= self._first_bytes(x)
                if not self.nullable[x]:
                    return out
            return out | self._candidates(stack[:-1])
        if k is Ran:
            return self._candidates(stack[:-1]) - self.run_bytes
        return set(top.ws) | self.ignore_bytes     # End

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
        if isinstance(node, SeqNode):      # (what may follow an empty value is the caller's: `_candidates`)
            out = set()
            for x in node.items:
                out |= self._first(x, visiting)
                if not self.nullable[x]:
                    break
            return out
        return set()
