"""Context-free grammars (Lark, GBNF, structural tags) -> the one grammar IR (ir/), which parser/ runs as it runs
a JSON Schema's.

    lark_to_ir / gbnf_to_ir      the frontends: grammar text -> rules (cfg_ir.py: rules, terminals as byte DFAs)
    structural_tag_to_ir         free text, triggers, begin / JSON value / end -> rules (the JSON value a
                                 Subgrammar terminal: the schema's grammar IR)
    normalize                    -> the same language without empty alternatives or left recursion
    lower_rules                  -> GrammarIR: unions, sequences, lexemes (lowering.py)
Depends on automata/, ir/ and errors.py."""
import re

from .cfg_ir import CfgIR
from .gbnf_lowering import gbnf_to_ir
from .lark_frontend import lark_to_ir
from .lowering import lower_rules

GRAMMAR_SYNTAXES = ("lark", "gbnf")
_GBNF_RULE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_-]*\s*::=", re.MULTILINE)


def grammar_syntax(text: str) -> str:
    """"gbnf" if `text` defines a rule the GBNF way (`name ::= ...` at a line's start), else "lark"."""
    return "gbnf" if _GBNF_RULE.search(text) else "lark"

__all__ = ["GRAMMAR_SYNTAXES", "grammar_syntax", "CfgIR", "gbnf_to_ir", "lark_to_ir", "lower_rules"]
