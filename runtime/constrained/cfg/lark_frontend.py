"""Lark grammar text -> CfgIR, with the `lark` package doing the parsing: it expands EBNF (`?`, `*`, `+`, `[]`,
groups), templates and `%import`s into plain rules, and folds terminals built from other terminals into one
regex each. Rule and terminal priorities, aliases and tree shaping do not change which strings are valid and
are left out. Every terminal becomes a byte DFA (lookarounds and backreferences cannot: refused by name)."""
from __future__ import annotations

from ..errors import GrammarError
from .cfg_ir import CfgIR, Sym, Terminal, literal_terminal, regex_terminal


def lark_to_ir(text: str, start: str = "start") -> CfgIR:
    """Parse Lark grammar `text`, whose start rule is `start`. Raises GrammarError naming the rule or terminal."""
    import lark
    try:
        parsed = lark.Lark(text, parser="earley", lexer="dynamic", start=start)
    except lark.exceptions.LarkError as e:
        raise GrammarError(f"lark grammar: {e}".strip()) from None
    terminals: dict[str, Terminal] = {}
    for t in parsed.terminals:
        pattern = t.pattern
        if pattern.type == "str" and not pattern.flags:
            terminals[t.name] = literal_terminal(t.name, pattern.value)
        else:
            terminals[t.name] = regex_terminal(t.name, pattern.to_regexp(),
                                             source=f"/{pattern.value}/" + "".join(sorted(pattern.flags)))
    rules: dict[str, list[tuple[Sym, ...]]] = {}
    for r in parsed.rules:
        alt = tuple(Sym(str(s.name), s.is_term) for s in r.expansion)
        for s in alt:
            if s.terminal and s.name not in terminals:
                raise GrammarError(f"terminal {s.name!r} used in rule {str(r.origin.name)!r} has no pattern "
                                   "(%declare'd terminals, fed by a postlexer, are not supported)")
        rules.setdefault(str(r.origin.name), []).append(alt)
    return CfgIR({k: tuple(v) for k, v in rules.items()}, terminals, start, tuple(parsed.ignore_tokens))
