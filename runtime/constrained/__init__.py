"""Constrained decoding: regex / JSON Schema -> byte-level automata + token masks, and jump-forward.

    compiler = GrammarCompiler(tokenizer)
    grammar = compiler.compile_json_schema(schema)     # or compile_regex(pattern), compile_grammar(text, "lark"
                                                       # | "gbnf"); cached, shared, immutable
    m = grammar.matcher()                              # per-request state
    m.fill_next_token_bitmask(bitmask, row); m.accept_token(token_id); m.is_accepting()
    m.find_jump_forward_string(); m.rollback(n); m.reset()   # xgrammar's verbs, one name each
    jump_forward_tokens(tokenizer, m)                  # forced tokens, cut where no token can straddle

How it fits together (dependencies point up this list, never down; tests/runtime/constrained/
test_no_import_cycles.py checks it):
- automata/: regexes (our front end over the stdlib parser) and word sets as character automata over codepoint
  ranges, lowered to byte DFAs (UTF-8 exact; in JSON strings every escape of a character too); JSON
  number-range and format regexes.
- ir/: the grammar IR every frontend lowers to: small nodes (lexeme DFA, object, array, union) referring to
  each other by index, so $ref recursion is a cycle and big schemas stay linear; `str(grammar)` prints it.
- schema/: JSON Schema -> IR (a regex is one lexeme node: GrammarCompiler.compile_regex).
- vocab/: the vocabulary trie; a lexeme DFA is walked over all tokens at once with numpy, cached per DFA state.
- parser/: a pushdown parser over the IR (a stack of frames per parse; several stacks for anyOf); token masks
  per stack, where only tokens that end a lexeme part-way are checked against the stack; the shared `Grammar`,
  the per-request `GrammarMatcher`, and jump-forward (forced text -> safe tokens).
- cfg/: context-free grammars (Lark, GBNF) -> a CFG IR, normalized (no left recursion), run top-down over
  lexemes as sets of stacks, with masks from the same trie walks; `matcher()` is the same GrammarMatcher.
- compiler.py: `GrammarCompiler`, which owns the token index and the caches.
"""
from .cfg import grammar_syntax
from .compiler import GrammarCompiler
from .errors import GrammarError, UnsupportedSchemaError
from .parser.grammar import Grammar
from .parser.jump_forward import jump_forward_tokens
from .parser.matcher import GrammarMatcher

__all__ = ["GrammarCompiler", "Grammar", "GrammarMatcher", "GrammarError", "UnsupportedSchemaError",
           "jump_forward_tokens", "grammar_syntax"]
