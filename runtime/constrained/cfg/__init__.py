"""Context-free grammars (Lark, GBNF, structural tags) -> the same matcher interface as JSON Schema grammars.

    lark_to_ir / gbnf_to_ir      the frontends: grammar text -> CfgIR (cfg_ir.py: rules, terminals as byte DFAs)
    structural_tag_to_ir         free text, triggers, begin / JSON value / end -> CfgIR (the JSON value a
                                 Subgrammar terminal: a compiled JSON grammar reads it)
    normalize                    -> the same language without empty alternatives or left recursion
    CfgParser                    top-down over lexemes, every choice kept (a set of stacks of ints, a
                                 subgrammar's own stack on top as `Inside`)
    CfgMasks                     token masks per stack from the vocabulary trie walks, cached
    CfgGrammar                   the shared compiled grammar; `matcher()` is parser/matcher.py's GrammarMatcher
Depends on automata/, vocab/, parser/ (the matcher) and errors.py."""
import re

from .cfg_grammar import CfgGrammar
from .cfg_ir import CfgIR
from .gbnf_lowering import gbnf_to_ir
from .lark_frontend import lark_to_ir

GRAMMAR_SYNTAXES = ("lark", "gbnf")
_GBNF_RULE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_-]*\s*::=", re.MULTILINE)


def grammar_syntax(text: str) -> str:
    """"gbnf" if `text` defines a rule the GBNF way (`name ::= ...` at a line's start), else "lark"."""
    return "gbnf" if _GBNF_RULE.search(text) else "lark"

__all__ = ["GRAMMAR_SYNTAXES", "grammar_syntax", "CfgGrammar", "CfgIR", "gbnf_to_ir", "lark_to_ir"]
