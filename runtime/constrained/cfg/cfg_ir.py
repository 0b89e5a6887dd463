"""Rules: what the grammar frontends (Lark, GBNF, structural tags) read their text into before it is rewritten
(normalize.py) and lowered to the grammar IR (lowering.py): named rules whose alternatives are sequences of
symbols, named terminals (lexemes: byte DFAs, or subgrammars, another grammar IR's value such as a structural
tag's JSON value), the start rule, and the terminals skipped between lexemes (Lark's `%ignore`). Plain
immutable data; `str()` prints it as BNF.

    start ::= expr
    expr ::= expr PLUS term | term
    PLUS ::= "+"
    %ignore WS"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from ..automata.byte_dfa import ByteDFA, trimmed_dfa
from ..automata.dfa_lowering import lower_char_fsm
from ..automata.regex import regex_to_char_fsm
from ..errors import GrammarError


class Sym(NamedTuple):
    """A symbol of a rule's alternative: a terminal's name or a rule's name."""
    name: str
    terminal: bool

    def __str__(self) -> str:
        return self.name


Alt = tuple[Sym, ...]          # one alternative: a sequence of symbols (empty: the empty string)


@dataclass(frozen=True, eq=False)
class Terminal:
    """A lexeme: `dfa` accepts its byte strings (never the empty one); `source` is how it prints."""
    name: str
    dfa: ByteDFA
    source: str


@dataclass(frozen=True, eq=False)
class Subgrammar:
    """A value of another grammar IR (`ir`, e.g. a JSON Schema's): its nodes are embedded in the lowered
    grammar, so every constraint of that IR holds inside. It must not accept the empty string. `source` is how
    it prints here."""
    name: str
    ir: Any             # ir.grammar_ir.GrammarIR
    source: str


@dataclass(frozen=True, eq=False)
class CfgIR:
    """Rules (name -> alternatives), terminals (name -> Terminal or Subgrammar), the start rule, and the
    terminals that may appear between any two lexemes (and before the first and after the last) without being
    in a rule (byte-DFA terminals only)."""
    rules: Mapping[str, tuple[Alt, ...]]
    terminals: Mapping[str, Terminal | Subgrammar]
    start: str
    ignore: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = []
        for name, alts in self.rules.items():
            body = " | ".join(" ".join(map(str, a)) if a else '""' for a in alts)
            lines.append(f"{name} ::= {body}")
        lines += [f"{t.name} ::= {t.source}" for t in self.terminals.values()]
        lines += [f"%ignore {name}" for name in self.ignore]
        return "\n".join(lines)


def regex_terminal(name: str, pattern: str, source: str | None = None) -> Terminal:
    """A terminal matching Python regex `pattern` (whole match). Raises GrammarError naming the terminal if the
    regex uses what an automaton cannot express, or matches the empty string."""
    try:
        dfa = lower_char_fsm(regex_to_char_fsm(pattern), False)
    except (GrammarError, OverflowError) as e:
        raise GrammarError(f"terminal {name}: {e}") from None
    if dfa.accepting[dfa.start]:
        raise GrammarError(f"terminal {name} (/{pattern}/) matches the empty string; a lexeme must read at least "
                           "one character (make it optional in the rule instead, e.g. `X?`)")
    if dfa.is_empty():
        raise GrammarError(f"terminal {name} (/{pattern}/) matches nothing")
    return Terminal(name, dfa, source or f"/{pattern}/")


def literal_terminal(name: str, text: str) -> Terminal:
    """A terminal matching exactly `text` (non-empty)."""
    if not text:
        raise GrammarError(f"terminal {name} is the empty string; a lexeme must read at least one character")
    return Terminal(name, ByteDFA.literal([text.encode("utf-8")]), _quote(text))


def without_empty(dfa: ByteDFA) -> ByteDFA:
    """The same language minus the empty string (a fresh, non-accepting start state with the start's row)."""
    rows = dfa.table.tolist()
    rows.append(list(rows[dfa.start]))
    acc = dfa.accepting.tolist() + [False]
    return trimmed_dfa(rows, len(rows) - 1, acc, {}, [False] * len(rows))


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'
