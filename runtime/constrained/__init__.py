"""Constrained decoding: regex / JSON Schema -> byte-level automata + token masks, and jump-forward.

    compiler = GrammarCompiler(tokenizer)
    grammar = compiler.compile_json_schema(schema)     # or compile_regex(pattern); cached, shared, immutable
    m = grammar.matcher()                              # per-request state
    m.fill_bitmask(bitmask, row); m.advance(token_id); m.is_accepting(); m.forced_text()
    jump_forward_tokens(tokenizer, m)                  # forced tokens, cut where no token can straddle

How it fits together:
- charfsm.py / regex.py: regexes (interegular) and word sets as character automata over codepoint ranges.
- byte_dfa.py / key_dfa.py: lowered to byte DFAs (UTF-8 exact; in JSON strings every escape of a character too).
- schema.py: a JSON Schema becomes small nodes (lexeme DFA, object, array, union) referring to each other by
  index, so $ref recursion is a cycle and big schemas stay linear; json_numbers.py / formats.py give the
  number-range and format automata.
- grammar.py: a pushdown parser over those nodes (a stack of frames per parse; several stacks for anyOf).
- token_index.py: the vocabulary trie; a lexeme DFA is walked over all tokens at once with numpy, cached per
  DFA state; only tokens that end a lexeme part-way are checked against the stack.
- matcher.py: the per-request state; jump_forward.py: forced text -> safe tokens.
"""
from .compiler import GrammarCompiler
from .errors import GrammarError, UnsupportedSchemaError
from .grammar import Grammar
from .jump_forward import jump_forward_tokens
from .matcher import GrammarMatcher

__all__ = ["GrammarCompiler", "Grammar", "GrammarMatcher", "GrammarError", "UnsupportedSchemaError",
           "jump_forward_tokens"]
