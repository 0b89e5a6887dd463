"""Context-free grammars (Lark, GBNF) -> the same matcher interface as JSON Schema grammars.

    lark_to_ir / gbnf_to_ir      the frontends: grammar text -> CfgIR (cfg_ir.py: rules, terminals as byte DFAs)
    normalize                    -> the same language without empty alternatives or left recursion
    CfgParser                    top-down over lexemes, every choice kept (a set of stacks of ints)
    CfgMasks                     token masks per stack from the vocabulary trie walks, cached
    CfgGrammar                   the shared compiled grammar; `matcher()` is parser/matcher.py's GrammarMatcher
Depends on automata/, vocab/, parser/ (the matcher) and errors.py."""
from .cfg_grammar import CfgGrammar
from .cfg_ir import CfgIR
from .gbnf_lowering import gbnf_to_ir
from .lark_frontend import lark_to_ir

GRAMMAR_SYNTAXES = ("lark", "gbnf")

__all__ = ["GRAMMAR_SYNTAXES", "CfgGrammar", "CfgIR", "gbnf_to_ir", "lark_to_ir"]
