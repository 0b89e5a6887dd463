"""Constrained decoding: regex / JSON Schema -> byte-level automata + token masks, and jump-forward.

    compiler = GrammarCompiler(tokenizer)
    grammar = compiler.compile_json_schema(schema)     # or compile_regex(pattern); cached, shared, immutable
    m = grammar.matcher()                              # per-request state
    m.fill_bitmask(bitmask, row); m.advance(token_id); m.is_accepting(); m.forced_text()
"""
from .compiler import GrammarCompiler
from .errors import GrammarError, UnsupportedSchemaError
from .grammar import Grammar
from .jump_forward import jump_forward_tokens
from .matcher import GrammarMatcher

__all__ = ["GrammarCompiler", "Grammar", "GrammarMatcher", "GrammarError", "UnsupportedSchemaError",
           "jump_forward_tokens"]
