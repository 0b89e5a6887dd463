"""A compiled grammar: lexeme DFAs inside a small pushdown parser for JSON structure.

The parts, each in its own file: `Parser` (parser.py: frames and byte steps), `ObjectKeys` (object_keys.py:
property names), `StackMasks` (stack_masks.py: token masks per parse stack, cached). A `Grammar` is immutable
and shared between requests; its caches only grow. `matcher()` gives the per-request state."""
from __future__ import annotations

from ..errors import GrammarError
from ..ir.nodes import ArrayNode, LexNode, Node, ObjectNode, UnionNode
from ..vocab.token_index import TokenIndex
from .matcher import GrammarMatcher
from .object_keys import ObjectKeys
from .frames import END, Stack
from .parser import Parser
from .stack_masks import StackMasks

WS = frozenset(b" \t\n\r")


class Grammar:
    """Immutable compiled grammar shared by all requests; `matcher()` gives per-request state."""

    def __init__(self, kind: str, spec: str, index: TokenIndex, nodes: list[Node], root: int,
                 whitespace: str = "any", root_frame: str = "V", property_order: str = "any"):
        self.kind, self.spec, self.index = kind, spec, index
        self.nodes = nodes
        self.root = root
        self.whitespace = whitespace
        self.sat = _satisfiable(nodes)
        if not self.sat[root]:
            raise GrammarError(f"{kind} {spec[:200]!r} admits no value at all")
        keys = ObjectKeys(nodes, self.sat, canonical=whitespace == "compact",
                          ordered=property_order == "schema")
        keys.build_all()      # 1-3 ms per object: paid while compiling, not on the object's first token
        for dfa in keys.built() + [n.dfa for n in nodes if isinstance(n, LexNode)]:
            dfa.walk_flat     # the tables the trie walks gather from (cached on the shared DFA)
        self.parser = Parser(nodes, self.sat, WS if whitespace == "any" else frozenset(), keys)
        start = self.parser.lex_frame(root, nodes[root].dfa.start) if root_frame == "L" else \
            self.parser.value_frame(root)
        self.initial: tuple[Stack, ...] = ((END, start),)
        self.masks = StackMasks(self.parser, nodes, index)
        self.vocab_size = index.vocab_size
        self.words = self.masks.words
        # what the matcher uses
        self.run = self.parser.run
        self.accepting = self.parser.accepting
        self.next_bytes = self.parser.next_bytes
        self.stack_mask = self.masks.stack_mask

    def matcher(self) -> GrammarMatcher:
        """A new per-request matcher at the start of the grammar."""
        return GrammarMatcher(self)

    def __repr__(self) -> str:
        return f"Grammar({self.kind}, {len(self.nodes)} nodes, {self.spec[:60]!r})"


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
