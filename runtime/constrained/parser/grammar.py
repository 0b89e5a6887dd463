"""The compiled grammar: a grammar IR (ir/) made runnable for one vocabulary, whatever it was lowered from (regex,
JSON Schema, Lark, GBNF, structural tags).

The parts, each in its own file: `Parser` (parser.py: byte steps over the frames of frames.py), `ObjectKeys`
(object_keys.py: property names), `StackMasks` (stack_masks.py: token masks per parse stack, cached). A
`Grammar` is immutable and shared between requests, apart from its caches (charged to its index's budget).
`matcher()` gives the per-request state; `str()` prints the IR's rules."""
from __future__ import annotations

from ..errors import GrammarError
from ..ir.grammar_ir import GrammarIR
from ..ir.nodes import LexNode, SeqNode
from ..vocab.token_index import TokenIndex
from .frames import END, Stack
from .matcher import GrammarMatcher
from .object_keys import ObjectKeys
from .parser import Parser
from .stack_masks import StackMasks


class Grammar:
    """Immutable compiled grammar shared by all requests; `matcher()` gives per-request state."""

    def __init__(self, kind: str, spec: str, index: TokenIndex, ir: GrammarIR, classify_states: int = 0):
        """`kind` and `spec` name what `ir` was lowered from (for messages and repr). `classify_states`: lexeme
        DFA states whose token classes (the shared, per-state part of every mask) are made now rather than by the
        first masks that meet them, smallest DFAs first (a grammar's keywords; ~40 us a state). Raises
        GrammarError if the IR admits no value at all."""
        self.kind, self.spec, self.index, self.ir = kind, spec, index, ir
        self.nodes = nodes = ir.nodes
        self.root = root = ir.root
        self.sat = ir.satisfiable
        if not self.sat[root]:
            raise GrammarError(f"{kind} {spec[:200]!r} admits no value at all")
        keys = ObjectKeys(nodes, self.sat, canonical=ir.canonical, ordered=ir.ordered, unique=ir.unique_keys,
                          index=index)
        keys.build_all()      # 1-3 ms per object: paid while compiling, not on the object's first token
        for dfa in keys.built() + [n.dfa for n in nodes if isinstance(n, LexNode)]:
            dfa.walk_flat     # the tables the trie walks gather from (cached on the shared DFA)
        self.parser = Parser(ir, keys, index.budget)
        # the input starts with a value of the root; with no whitespace to skip, a root lexeme is entered at
        # once, so that a regex matching the empty text accepts before any byte; a root sequence (a grammar from
        # rules) starts at its first item
        if isinstance(nodes[root], SeqNode):
            start = self.parser.seq_frame(root, 0)
        elif not ir.whitespace and isinstance(nodes[root], LexNode):
            start = self.parser.lex_frame(root, nodes[root].dfa.start)
        else:
            start = self.parser.value_frame(root)
        self.initial: tuple[Stack, ...] = ((END, start),)
        self.masks = StackMasks(self.parser, nodes, index)
        if classify_states:
            self.masks.classify_states(classify_states)
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

    def __str__(self) -> str:
        return str(self.ir)
