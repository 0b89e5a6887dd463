"""A compiled context-free grammar: a normalized CfgIR made runnable for one vocabulary, with the same
`matcher()` as JSON's `Grammar` (parser/matcher.py's GrammarMatcher runs it: allowed masks, accept_token,
accepting, forced text, so jump-forward works unchanged). Immutable and shared between requests, apart from its
caches (LruCaches charged to the index's budget)."""
from __future__ import annotations

from ..errors import GrammarError
from ..parser.matcher import GrammarMatcher
from ..vocab.token_index import TokenIndex
from .cfg_ir import CfgIR
from .cfg_masks import CfgMasks
from .cfg_parser import CfgParser, Stack
from .normalize import normalize


class CfgGrammar:
    """Implements parser/matcher.py's CompiledGrammar over CfgParser stacks."""

    def __init__(self, kind: str, spec: str, index: TokenIndex, ir: CfgIR):
        """`kind` ("lark", "gbnf", "structural_tag") and `spec` (the source text) name what `ir` came from.
        Raises GrammarError if the grammar cannot be run (naming the rule)."""
        self.kind, self.spec, self.index = kind, spec, index
        self.source_ir = ir
        self.ir = normalize(ir)
        self.parser = CfgParser(self.ir, index.budget)
        if not self.parser.initial:
            raise GrammarError(f"{kind} grammar admits no string at all")
        for dfa in filter(None, self.parser.dfas):
            dfa.walk_flat     # the tables the trie walks gather from (cached on the shared DFA)
        self.bodies = tuple(self.parser.subs.values())      # the compiled grammars its subgrammars run
        self.masks = CfgMasks(self.parser, index)
        self.masks.classify_roots()
        self.initial: tuple[Stack, ...] = self.parser.initial
        self.nodes = ()        # no JSON nodes (GrammarMatcher reads them only under generation caps)
        self.vocab_size = index.vocab_size
        self.words = self.masks.words
        self.run = self.parser.run
        self.accepting = self.parser.accepting
        self.next_bytes = self.parser.next_bytes
        self.stack_mask = self.masks.stack_mask

    def matcher(self) -> GrammarMatcher:
        """A new per-request matcher at the start of the grammar."""
        return GrammarMatcher(self)

    def __repr__(self) -> str:
        return f"CfgGrammar({self.kind}, {len(self.ir.rules)} rules, {self.spec[:60]!r})"

    def __str__(self) -> str:
        return str(self.source_ir)
