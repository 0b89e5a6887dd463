"""GrammarIR: what every frontend lowers to (a regex: one lexeme node; a JSON Schema: schema/; Lark, GBNF and
structural tags: rules of sequences and unions, cfg/lowering.py) and all that the one parser needs to run it."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, Optional

from .nodes import ArrayNode, LexNode, Node, ObjectNode, SeqNode, UnionNode
from .printer import format_rules

JSON_WS = frozenset(b" \t\n\r")


@dataclass(frozen=True, eq=False)
class GrammarIR:
    """Nodes referring to each other by index, the root's index, and the conventions the parser applies between
    lexemes. Immutable. `str()` prints it as rules, one per line (printer.py)."""
    nodes: tuple[Node, ...]
    root: int
    whitespace: frozenset[int] = frozenset()    # bytes skipped before values and around punctuation
    canonical: bool = False     # strings without needless escapes (object-name DFAs built later follow it)
    ordered: bool = False       # object properties in the schema's order (see parser/object_keys.py)
    unique_keys: bool = False   # no property name twice in one object, undeclared names included (generation)
    capped: frozenset[int] = frozenset()    # nodes bounded by a generation cap (see generation_caps.py)
    # bounded whitespace in generation, as lexeme nodes (`whitespace` is then empty):
    separator: Optional[int] = None     # a LexNode read right after every ':' and ',' ("standard": one space)
    ws_run: Optional[int] = None        # a LexNode for one run of whitespace, allowed wherever JSON allows it
                                        # inside the root value ("flexible"); runs never follow each other
    # context-free grammars: lexemes read any number of times between the items of a sequence, before the first
    # and after the last (Lark's `%ignore`), and the names the printer gives nodes (rules and terminals)
    ignore: tuple[int, ...] = ()
    names: Optional[Mapping[int, str]] = None

    def __post_init__(self):
        for name in ("root", "separator", "ws_run"):
            i = getattr(self, name)
            if i is not None and not 0 <= i < len(self.nodes):
                raise ValueError(f"{name} {i} is not a node index (there are {len(self.nodes)} nodes)")
        for name in ("separator", "ws_run"):
            i = getattr(self, name)
            if i is not None and not isinstance(self.nodes[i], LexNode):
                raise ValueError(f"{name} {i} is not a lexeme node")
        for i in self.ignore:
            if not (0 <= i < len(self.nodes) and isinstance(self.nodes[i], LexNode)):
                raise ValueError(f"ignore {i} is not a lexeme node")
            if self.nodes[i].dfa.accepting[self.nodes[i].dfa.start]:
                raise ValueError(f"ignore {i} matches the empty text")

    @cached_property
    def satisfiable(self) -> tuple[bool, ...]:
        """Per node: whether some finite value matches it (a least fixpoint)."""
        return _satisfiable(self.nodes)

    @cached_property
    def nullable(self) -> tuple[bool, ...]:
        """Per node: whether it matches the empty text (a least fixpoint; JSON values never do)."""
        return _least_fixpoint(self.nodes, _nullable)

    def __str__(self) -> str:
        return format_rules(self)


def _least_fixpoint(nodes: tuple[Node, ...], holds) -> tuple[bool, ...]:
    """The least per-node property where `holds(node, known)` says whether a node has it given the nodes
    known to have it so far (monotone: it only ever turns properties on)."""
    out = [False] * len(nodes)
    changed = True
    while changed:
        changed = False
        for i, n in enumerate(nodes):
            if not out[i] and holds(n, out):
                out[i] = changed = True
    return tuple(out)


def _nullable(n: Node, null: list[bool]) -> bool:
    if isinstance(n, LexNode):
        return bool(n.dfa.accepting[n.dfa.start]) and n.min_chars == 0
    if isinstance(n, UnionNode):
        return any(null[a] for a in n.alts)
    if isinstance(n, SeqNode):
        return all(null[a] for a in n.items)
    return False


def _satisfiable(nodes: tuple[Node, ...]) -> tuple[bool, ...]:
    return _least_fixpoint(nodes, _sat)


def _sat(n: Node, sat: list[bool]) -> bool:
    if isinstance(n, LexNode):
        return not n.dfa.is_empty() and (n.max_chars is None or n.min_chars <= n.max_chars)
    if isinstance(n, ObjectNode):
        ok = all(r in n.props and sat[n.props[r]] for r in n.required) and \
            (n.max_props is None or len(n.required) <= n.max_props) and \
            (len(n.required) >= n.min_props or (n.additional is not None and sat[n.additional]) or
             any(sat[v] for v in n.pattern_nodes.values()) or
             sum(1 for v in n.props.values() if sat[v]) >= n.min_props)
        return ok and not (n.additional is None and any(r not in n.props for r in n.required))
    if isinstance(n, ArrayNode):
        if n.max_items is not None and n.min_items > n.max_items:
            return False
        for j in range(min(n.min_items, len(n.prefix) + 1)):   # positions past the prefix are all `items`
            item = n.item(j)
            if item is None or not sat[item]:
                return False
        return not n.counts or n.completable(sat, 0, 0)
    if isinstance(n, UnionNode):
        return any(sat[a] for a in n.alts)
    if isinstance(n, SeqNode):
        return all(sat[a] for a in n.items)
    return False
