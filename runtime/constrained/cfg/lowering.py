"""Rules (cfg_ir.CfgIR, normalized: normalize.py) -> the grammar IR every frontend lowers to (ir/grammar_ir.py),
which the one parser runs:

    terminal          a LexNode (its byte DFA)
    subgrammar        another GrammarIR's nodes, embedded after these (a structural tag's JSON value)
    rule              a UnionNode of its alternatives (a rule with one alternative: that alternative's SeqNode)
    alternative       a SeqNode of its symbols' nodes (in a union, one symbol: that node; none: the empty lexeme)
    %ignore           the IR's `ignore` lexemes
    the start         a SeqNode of the start rule alone: the parse starts on its Seq frame

Nodes keep the rule and terminal names for the printer. A subgrammar's JSON conventions (whitespace, canonical
strings, property order, separator, bounded runs) become the IR's; all of a grammar's subgrammars must agree
on them (a structural tag compiles every structure's schema with the same options)."""
from __future__ import annotations

from ..automata.byte_dfa import ByteDFA, trimmed_dfa
from ..errors import GrammarError
from ..ir.grammar_ir import JSON_WS, GrammarIR
from ..ir.nodes import LexNode, Node, SeqNode, UnionNode, shifted
from .cfg_ir import CfgIR, Subgrammar
from .normalize import START, normalize

_CONVENTIONS = ("whitespace", "canonical", "ordered", "unique_keys")
_EMPTY = ByteDFA.literal([b""])
# JSON whitespace, any amount: what a JSON text read in mode "any" may start with
_OPTIONAL_WS = trimmed_dfa([[0 if b in JSON_WS else -1 for b in range(256)]], 0, [True], {}, [False])


def lower_rules(ir: CfgIR) -> GrammarIR:
    """The GrammarIR of rules `ir` (normalized first). Raises GrammarError naming the rule or terminal at fault."""
    norm = normalize(ir)
    nodes: list[Node | None] = []
    names: dict[int, str] = {}
    at: dict[str, int] = {}           # terminal or rule name -> its node
    subs = [t.ir for t in norm.terminals.values() if isinstance(t, Subgrammar)]
    conventions = _conventions(subs)
    separator = ws_run = None
    capped: set[int] = set()
    for name, t in norm.terminals.items():
        if isinstance(t, Subgrammar):
            continue
        at[name] = len(nodes)
        names[len(nodes)] = name
        nodes.append(LexNode(t.dfa, source=t.source))
    for name in norm.ignore:
        if isinstance(norm.terminals[name], Subgrammar):
            raise GrammarError(f"terminal {name!r} is a subgrammar, which cannot be ignored between lexemes")
    for name in norm.rules:
        at[name] = len(nodes)
        names[len(nodes)] = name
        nodes.append(None)            # filled below: rules refer to each other in cycles
    for name, t in norm.terminals.items():
        if not isinstance(t, Subgrammar):
            continue
        sub = t.ir
        if sub.nullable[sub.root]:
            raise GrammarError(f"subgrammar {name!r} accepts the empty string; a lexeme must read at least one byte")
        k = len(nodes)
        nodes.extend(shifted(n, k) for n in sub.nodes)
        root = sub.root + k
        capped.update(c + k for c in sub.capped)
        if sub.whitespace:            # a JSON text may start with whitespace ("any" mode)
            nodes.append(LexNode(_OPTIONAL_WS, source="/[ \\t\\n\\r]*/"))
            nodes.append(SeqNode((len(nodes) - 1, root)))
            root = len(nodes) - 1
        at[name] = root
        names[root] = name
        if separator is None and sub.separator is not None:
            separator = sub.separator + k
        if ws_run is None and sub.ws_run is not None:
            ws_run = sub.ws_run + k
    empty = None
    for name, alts in norm.rules.items():
        if len(alts) == 1:
            nodes[at[name]] = SeqNode(tuple(at[s.name] for s in alts[0]))
            continue
        parts = []
        for alt in alts:
            if not alt:
                if empty is None:
                    empty = len(nodes)
                    nodes.append(LexNode(_EMPTY, source='""'))
                parts.append(empty)
            elif len(alt) == 1:
                parts.append(at[alt[0].name])
            else:
                parts.append(len(nodes))
                nodes.append(SeqNode(tuple(at[s.name] for s in alt)))
        nodes[at[name]] = UnionNode(tuple(parts))
    root = len(nodes)
    nodes.append(SeqNode((at[START],)))
    return GrammarIR(tuple(nodes), root, separator=separator, ws_run=ws_run, capped=frozenset(capped),
                     ignore=tuple(at[n] for n in norm.ignore), names=names, **conventions)


def _conventions(subs: list[GrammarIR]) -> dict:
    """The JSON conventions the subgrammars share (none: the defaults)."""
    if not subs:
        return {}
    first = {c: getattr(subs[0], c) for c in _CONVENTIONS}
    for s in subs[1:]:
        for c in _CONVENTIONS:
            if getattr(s, c) != first[c]:
                raise GrammarError(f"the JSON values of one grammar must share their whitespace and property "
                                   f"options; {c} differs")
    return first
