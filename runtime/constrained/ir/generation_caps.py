"""Generation caps: bounds that end a runaway value, applied to a grammar IR in generation mode.

A small model can write a value that the schema never bounds and that it cannot end: a string repeating
`v2/v2/v2/...`, an array repeating its item, objects nested into an open `additionalProperties`
(`{"type":{"type":...`). Each cap bounds one of these where the schema sets no bound of its own, generously, so
that the grammar closes such a value instead of letting it spend the whole token budget:
- `max_string_chars`: a string without maxLength (and of unbounded length) holds at most this many characters;
- `max_array_items`: an array without maxItems holds at most this many items;
- `max_object_depth`: recursion (a `$ref` cycle, or an open value that may hold itself) nests at most this many
  objects and arrays of the cycle; deeper, a value that can only open another one is not offered where the
  schema lets it be left out: a union drops such alternatives, an object such optional properties, an array
  such optional items.
A schema's own bounds always win (a maxLength, a maxItems, and nesting the schema spells out without
recursion are left as they are), and a cap never makes a value impossible: a string cap is raised to the
string's shortest value, an array cap to minItems, and a value that the depth cap would leave with no valid
value (a required object, an object needing minProperties) is left as the schema says. Every output stays
valid; the caps only narrow which valid texts can be generated, like the whitespace modes and the digit cap.

`apply_generation_caps` returns a new GrammarIR whose `capped` node ids are where a cap applies: a string there
that reaches `max_chars`, an array whose count reaches `max_items`, an object at the depth cap (the matcher
counts them, see GrammarMatcher.capped_values)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ..automata.byte_dfa import ByteDFA
from .grammar_ir import GrammarIR
from .nodes import ArrayNode, LexNode, NeverNode, Node, ObjectNode, UnionNode, children

@dataclass(frozen=True)
class GenerationCaps:
    """Generation-mode bounds for values the schema leaves unbounded (None: no cap of that kind). Defaults:
    512 characters per string (a long paragraph), 128 items per array, recursion 12 containers deep."""
    max_string_chars: Optional[int] = 512
    max_array_items: Optional[int] = 128
    max_object_depth: Optional[int] = 12

    def __post_init__(self) -> None:
        for name in ("max_string_chars", "max_array_items", "max_object_depth"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"GenerationCaps.{name} must be a positive int or None (no cap), got {v!r}")


def apply_generation_caps(ir: GrammarIR, caps: GenerationCaps) -> GrammarIR:
    """`ir` with `caps` applied (module docstring); `ir` itself when nothing is capped."""
    nodes: list[Node] = list(ir.nodes)
    capped: set[int] = set(ir.capped)
    if caps.max_string_chars is not None:
        for i, n in enumerate(nodes):
            if isinstance(n, LexNode) and n.max_chars is None and _is_string(n.dfa) and _is_infinite(n.dfa):
                shortest = int(n.dfa.char_dist[n.dfa.start])
                nodes[i] = replace(n, max_chars=max(caps.max_string_chars, n.min_chars, shortest))
                capped.add(i)
    if caps.max_array_items is not None:
        for i, n in enumerate(nodes):
            if isinstance(n, ArrayNode) and n.max_items is None and n.items is not None:
                least = len(n.prefix) + n.min_contains if n.counts else 0   # room for the contains matches
                nodes[i] = replace(n, max_items=max(caps.max_array_items, n.min_items, least))
                capped.add(i)
    root = ir.root
    if caps.max_object_depth is not None:
        root = _DepthCap(nodes, capped, caps.max_object_depth).apply(ir.root)
    if len(nodes) == len(ir.nodes) and all(a is b for a, b in zip(nodes, ir.nodes)):
        return ir
    return replace(ir, nodes=tuple(nodes), root=root, capped=frozenset(capped))


def _is_string(dfa: ByteDFA) -> bool:
    """A JSON string lexeme: starts with a quote and counts characters."""
    return dfa.live_bytes(dfa.start) == (0x22,) and bool(dfa.boundary.any())


def _is_infinite(dfa: ByteDFA) -> bool:
    """Whether the DFA accepts infinitely many texts: a cycle among the states reachable from the start (every
    state of a trimmed DFA can reach acceptance). Kahn's algorithm on the reachable part."""
    src, dst = (a.tolist() for a in dfa.edges)
    out: dict[int, list[int]] = {}
    for a, b in zip(src, dst):
        out.setdefault(a, []).append(b)
    reach, todo = {dfa.start}, [dfa.start]
    while todo:
        for b in out.get(todo.pop(), ()):
            if b not in reach:
                reach.add(b)
                todo.append(b)
    indeg = dict.fromkeys(reach, 0)
    for a in reach:
        for b in out.get(a, ()):
            indeg[b] += 1
    todo = [s for s, d in indeg.items() if d == 0]
    removed = 0
    while todo:
        removed += 1
        for b in out.get(todo.pop(), ()):
            indeg[b] -= 1
            if indeg[b] == 0:
                todo.append(b)
    return removed < len(reach)


class _DepthCap:
    """One application of max_object_depth to `nodes` (extended in place; `capped` gains the objects and arrays
    at the cap). Only recursive parts are copied: a node from which a cycle of nodes can be reached gets one copy
    per depth below the cap and one "floor" copy for every depth from the cap on, narrowed."""

    def __init__(self, nodes: list[Node], capped: set[int], depth: int):
        self.nodes, self.capped, self.depth = nodes, capped, depth
        self.recursive = _recursive(nodes)
        self.cyclic = _on_cycles(nodes, self.recursive)
        self.drop = _only_recursion(nodes, self.cyclic)
        self.sat = GrammarIR(tuple(nodes), 0).satisfiable
        self._level: dict[tuple[int, int], int] = {}
        self._floor: dict[int, int] = {}
        self._never: Optional[int] = None

    def apply(self, root: int) -> int:
        new_root = self.copy(root, 0)
        # a narrowed floor copy with no valid value left is lifted (rebuilt as the schema says, its children
        # still floor copies) until every copy is satisfiable where its original is
        while True:
            sat = GrammarIR(tuple(self.nodes), 0).satisfiable
            lift = [(orig, c) for orig, c in self._floor.items() if self.sat[orig] and not sat[c]]
            if not lift:
                return new_root
            for orig, c in lift:
                self.nodes[c] = self._rebuild(self.nodes[orig], self._floor_child)
                if orig not in self.capped:
                    self.capped.discard(c)

    def copy(self, nid: int, d: int) -> int:
        """The node for a value of `nid` inside d containers."""
        if not self.recursive[nid]:
            return nid              # nesting the schema spells out: its own bound
        if d >= self.depth:
            return self._floor_copy(nid)
        key = (nid, d)
        c = self._level.get(key)
        if c is None:
            n = self.nodes[nid]
            c = self._level[key] = self._add(n)     # placeholder first: cycles refer back to it
            inner = d + 1 if isinstance(n, (ObjectNode, ArrayNode)) and self.cyclic[nid] else d
            self.nodes[c] = self._rebuild(n, lambda k: self.copy(k, inner))
            if nid in self.capped:
                self.capped.add(c)
        return c

    def _floor_child(self, nid: int) -> int:
        return self._floor_copy(nid) if self.recursive[nid] else nid

    def _floor_copy(self, nid: int) -> int:
        c = self._floor.get(nid)
        if c is None:
            n = self.nodes[nid]
            c = self._floor[nid] = self._add(n)
            self.nodes[c] = self._narrowed(n, c)
            if nid in self.capped:
                self.capped.add(c)
        return c

    def _narrowed(self, n: Node, c: int) -> Node:
        """Floor copy of `n` (node index c): no optional value below it that only recursion can give."""
        sc = [not d for d in self.drop]    # may be left at the floor
        if isinstance(n, UnionNode):
            keep = [a for a in n.alts if sc[a] and self.sat[a]]
            return UnionNode(tuple(self._floor_child(a) for a in (keep or n.alts)))
        if isinstance(n, ObjectNode):
            needed = set(n.required)
            never = self._never_node()

            def value(name, v):
                return self._floor_child(v) if name in needed or sc[v] else never
            props = {k: value(k, v) for k, v in n.props.items()}
            additional = None if n.additional is None else \
                (self._floor_child(n.additional) if sc[n.additional] else never)
            patterns = {k: self._floor_child(v) if sc[v] else never for k, v in n.pattern_nodes.items()}
            if never in props.values() or additional == never or never in patterns.values():
                self.capped.add(c)
            return replace(n, props=props, additional=additional, pattern_nodes=patterns)
        if isinstance(n, ArrayNode):
            j = n.min_items
            while j < len(n.prefix) and sc[n.prefix[j]]:
                j += 1
            limit = None if j >= len(n.prefix) and n.items is not None and sc[n.items] else j
            hi = n.max_items if limit is None else min(limit, n.max_items if n.max_items is not None else limit)
            if hi != n.max_items:
                self.capped.add(c)
            return replace(n, prefix=tuple(map(self._floor_child, n.prefix)),
                           items=None if n.items is None else self._floor_child(n.items), max_items=hi,
                           hits=tuple(None if k is None else self._floor_child(k) for k in n.hits),
                           misses=tuple(None if k is None else self._floor_child(k) for k in n.misses))
        return n

    def _rebuild(self, n: Node, child) -> Node:
        """`n` with every child index k replaced by child(k)."""
        if isinstance(n, UnionNode):
            return UnionNode(tuple(map(child, n.alts)))
        if isinstance(n, ObjectNode):
            return replace(n, props={k: child(v) for k, v in n.props.items()},
                           additional=None if n.additional is None else child(n.additional),
                           pattern_nodes={k: child(v) for k, v in n.pattern_nodes.items()})
        if isinstance(n, ArrayNode):
            return replace(n, prefix=tuple(map(child, n.prefix)),
                           items=None if n.items is None else child(n.items),
                           hits=tuple(None if k is None else child(k) for k in n.hits),
                           misses=tuple(None if k is None else child(k) for k in n.misses))
        return n

    def _add(self, n: Node) -> int:
        self.nodes.append(n)
        return len(self.nodes) - 1

    def _never_node(self) -> int:
        if self._never is None:
            self._never = self._add(NeverNode())
        return self._never


def _recursive(nodes: list[Node]) -> list[bool]:
    """Per node: whether a value of it can nest without bound (the node reaches a cycle of nodes). What is left
    after repeatedly removing nodes whose children are all removed (Kahn's algorithm, on out-degrees)."""
    kids = [children(n) for n in nodes]
    parents: list[list[int]] = [[] for _ in nodes]
    for i, ks in enumerate(kids):
        for k in ks:
            parents[k].append(i)
    left = [len(ks) for ks in kids]
    todo = [i for i, d in enumerate(left) if d == 0]
    done = [False] * len(nodes)
    while todo:
        i = todo.pop()
        done[i] = True
        for p in parents[i]:
            left[p] -= 1
            if left[p] == 0:
                todo.append(p)
    return [not d for d in done]


def _on_cycles(nodes: list[Node], recursive: list[bool]) -> list[bool]:
    """Per node: whether it lies on a cycle of nodes (only nodes that reach a cycle can)."""
    out = [False] * len(nodes)
    for i in (i for i, r in enumerate(recursive) if r):
        seen, todo = set(), [k for k in children(nodes[i]) if recursive[k]]
        while todo and not out[i]:
            k = todo.pop()
            if k == i:
                out[i] = True
            elif k not in seen:
                seen.add(k)
                todo.extend(j for j in children(nodes[k]) if recursive[j])
    return out


def _only_recursion(nodes: list[Node], cyclic: list[bool]) -> list[bool]:
    """Per node: whether every value of it opens an object or array on a cycle (what the depth cap removes):
    such a container, or a union of only such alternatives."""
    out = [isinstance(n, (ObjectNode, ArrayNode)) and cyclic[i] for i, n in enumerate(nodes)]
    changed = True
    while changed:
        changed = False
        for i, n in enumerate(nodes):
            if not out[i] and isinstance(n, UnionNode) and n.alts and all(out[a] for a in n.alts):
                out[i] = changed = True
    return out
