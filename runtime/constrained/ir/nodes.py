"""Grammar IR nodes: the immutable pieces a regex, a JSON schema or a context-free grammar lowers to. Nodes refer
to each other by index into `GrammarIR.nodes`, so recursive schemas ($ref cycles) and recursive rules are plain
cycles of indices."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Optional

from ..automata.byte_dfa import ByteDFA

EXTRA = ("<additional property>",)   # key-DFA label of a property name not among `properties`


@dataclass(frozen=True, eq=False)
class LexNode:
    """A value that is one lexeme: string, number, literal, enum of scalars. `min_chars`/`max_chars` count
    JSON-decoded characters of a string lexeme outside the DFA (no product automaton needed)."""
    dfa: ByteDFA
    min_chars: int = 0
    max_chars: Optional[int] = None
    source: Optional[str] = None          # how it prints: a /regex/, a "literal", or words (`string`)

    @property
    def counted(self) -> bool:
        return self.min_chars > 0 or self.max_chars is not None


@dataclass(frozen=True, eq=False)
class ObjectNode:
    props: dict[str, int]                 # property name -> value node
    required: frozenset[str]
    additional: Optional[int]             # node for other names; None = no other names allowed
    min_props: int = 0
    max_props: Optional[int] = None
    patterns: tuple = ()                  # patternProperties: CharFSMs (search semantics)
    pattern_nodes: dict = field(default_factory=dict)   # frozenset of matched pattern indices -> value node
    deps: dict = field(default_factory=dict)   # dependentRequired: name -> names required when it is present
    pattern_text: tuple[str, ...] = ()    # the patterns' regexes, for printing

    @cached_property
    def rank(self) -> dict[str, int]:
        """Schema position of each named property (the generation order when properties are ordered)."""
        return {n: i for i, n in enumerate(self.props)}

    def other_node(self, matched: frozenset) -> Optional[int]:
        """Value node for a name not in `props` matching the given patterns (None: such names not allowed)."""
        return self.pattern_nodes[matched] if matched else self.additional


@dataclass(frozen=True, eq=False)
class ArrayNode:
    """Items by position: `prefix[i]`, then `items`. With `contains` counted (`counts`), item i is read as
    `hits[j]` (it matches contains) or `misses[j]` (it does not), j = min(i, len(prefix)); the parser counts the
    hits, which must end in [min_contains, max_contains]."""
    prefix: tuple[int, ...]
    items: Optional[int]                  # node for items past the prefix; None = none allowed
    min_items: int = 0
    max_items: Optional[int] = None
    hits: tuple[Optional[int], ...] = ()      # () or len(prefix) + 1 nodes: items AND contains
    misses: tuple[Optional[int], ...] = ()    # the same positions: items AND NOT contains (or items, no max)
    min_contains: int = 0
    max_contains: Optional[int] = None

    def item(self, i: int) -> Optional[int]:
        return self.prefix[i] if i < len(self.prefix) else self.items

    @property
    def counts(self) -> bool:
        return bool(self.hits)

    @property
    def index_cap(self) -> int:
        """Where the parser stops counting items when there is no max_items: past it all positions are alike."""
        return max(len(self.prefix), self.min_items) + 1

    def next_index(self, i: int) -> int:
        return i + 1 if self.max_items is not None or i + 1 <= self.index_cap else self.index_cap

    def counted_items(self, i: int, c: int) -> list[tuple[int, int]]:
        """(node, count after it) for each way to read item i with `c` hits so far (counts only). Without
        max_contains the count stops at min_contains (more does not matter)."""
        j = min(i, len(self.prefix))
        out = []
        hit, miss = self.hits[j], self.misses[j]
        if hit is not None and (self.max_contains is None or c < self.max_contains):
            out.append((hit, c + 1 if self.max_contains is not None else min(c + 1, self.min_contains)))
        if miss is not None:
            out.append((miss, c))
        return out

    def completable(self, sat, i: int, c: int) -> bool:
        """Whether an array with `i` items read (capped, `next_index`) and `c` hits can still end validly, given
        which nodes are satisfiable (`sat`). Counts only; a search over (index, count), both bounded."""
        todo, seen = [(i, c)], set()
        while todo:
            p, k = todo.pop()
            if (p, k) in seen:
                continue
            seen.add((p, k))
            if p >= self.min_items and k >= self.min_contains:
                return True
            if self.max_items is not None and p >= self.max_items:
                continue
            todo.extend((self.next_index(p), k2) for nid, k2 in self.counted_items(p, k) if sat[nid])
        return False


@dataclass(frozen=True, eq=False)
class UnionNode:
    alts: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class SeqNode:
    """`items` read one after another, nothing between them but the grammar's `ignore` lexemes (a rule's
    alternative; JSON whitespace is not read here)."""
    items: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class NeverNode:
    """No value at all (schema `false`, or contradictory constraints)."""


Node = LexNode | ObjectNode | ArrayNode | UnionNode | SeqNode | NeverNode


def children(node: Node) -> list[int]:
    """The nodes `node` refers to, in a fixed order (the printer's)."""
    if isinstance(node, ObjectNode):
        out = list(node.props.values())
        out += [node.pattern_nodes[k] for k in sorted(node.pattern_nodes, key=sorted)]
        return out + ([node.additional] if node.additional is not None else [])
    if isinstance(node, ArrayNode):
        return list(node.prefix) + ([node.items] if node.items is not None else []) + \
            [k for k in node.hits + node.misses if k is not None]
    if isinstance(node, UnionNode):
        return list(node.alts)
    if isinstance(node, SeqNode):
        return list(node.items)
    return []


def shifted(node: Node, k: int) -> Node:
    """`node` with every node index it holds moved by `k` (to embed one IR's nodes after another's)."""
    def o(i):
        return None if i is None else i + k
    if isinstance(node, ObjectNode):
        return replace(node, props={n: v + k for n, v in node.props.items()}, additional=o(node.additional),
                       pattern_nodes={m: v + k for m, v in node.pattern_nodes.items()})
    if isinstance(node, ArrayNode):
        return replace(node, prefix=tuple(i + k for i in node.prefix), items=o(node.items),
                       hits=tuple(map(o, node.hits)), misses=tuple(map(o, node.misses)))
    if isinstance(node, UnionNode):
        return UnionNode(tuple(i + k for i in node.alts))
    if isinstance(node, SeqNode):
        return SeqNode(tuple(i + k for i in node.items))
    return node
