"""The grammar IR as text, one rule per line, EBNF-like, for reading and debugging (`str(grammar)`):

    root ::= "{" members("name": lexeme_1, "tags"?: array_2){1,} "}"
    lexeme_1 ::= string (<= 20 chars)
    array_2 ::= "[" items(lexeme_3*){,3} "]"
    lexeme_3 ::= "\"red\"" | "\"green\""
    %ignore /[\t\n\r ]+/

Rules are named after the root and after each node's kind and index, and listed in the order the root first
reaches them. A lexeme shows the regex (`/.../`), literal or words it was built from. Beyond EBNF:
`members(...)` is an object's comma-separated `name: value` pairs, each name at most once, in any order (or
`in order`, the schema's): `"name"?` marks an optional property, `*` any other name, `/p/*` other names
matching pattern p; `items(a, b, c*)` is an array's comma-separated items (a, then b, then any number of c);
`{m,n}` after either bounds the count; `%ignore` is the whitespace allowed between structural tokens (or, in a
grammar from rules, the lexemes allowed between any two), `%ignore-once` the same for at most one run at a time,
`%after ':' ','` what is written after each of them. A sequence prints its items; nodes a grammar from rules
names (its rules and terminals) print under those names."""
from __future__ import annotations

import json
from typing import Optional

from .nodes import ArrayNode, LexNode, Node, ObjectNode, SeqNode, UnionNode, children

_KIND = {LexNode: "lexeme", ObjectNode: "object", ArrayNode: "array", UnionNode: "union", SeqNode: "seq"}
_ESCAPES = {9: r"\t", 10: r"\n", 13: r"\r"}


def format_rules(ir) -> str:
    """The rules of the nodes of GrammarIR `ir` reachable from its root, one per line (deterministic for equal
    IRs)."""
    nodes, root, names = ir.nodes, ir.root, ir.names or {}
    order = _reachable(nodes, (root,))
    order += [i for i in _reachable(nodes, ir.ignore) if i not in set(order)]
    # in a grammar from rules, the unnamed sequences and empty texts of its alternatives print where they are used
    inline = {i for i in order if names and i not in names and i != root and
              (isinstance(nodes[i], SeqNode) or (isinstance(nodes[i], LexNode) and nodes[i].source == '""'))}

    def name(i: int) -> str:
        if i in inline:
            return _body(nodes[i], name, ir.ordered)
        if i in names:
            return names[i]
        return "root" if i == root else f"{_KIND.get(type(nodes[i]), 'never')}_{i}"

    lines = [f"{name(i)} ::= {_body(nodes[i], name, ir.ordered)}" for i in order if i not in inline]
    if ir.whitespace:
        lines.append("%ignore /[" + "".join(_ESCAPES.get(b, chr(b)) for b in sorted(ir.whitespace)) + "]+/")
    lines += [f"%ignore {name(i)}" for i in ir.ignore]
    if ir.separator is not None:
        lines.append(f"%after ':' ',' {nodes[ir.separator].source}")
    if ir.ws_run is not None:
        lines.append(f"%ignore-once {nodes[ir.ws_run].source}")
    return "\n".join(lines)


def _reachable(nodes: tuple[Node, ...], roots) -> list[int]:
    order = list(dict.fromkeys(roots))
    seen = set(order)
    for i in order:                 # breadth-first; `order` grows while it is read
        for j in children(nodes[i]):
            if j not in seen:
                seen.add(j)
                order.append(j)
    return order


def _body(node: Node, name, ordered: bool) -> str:
    if isinstance(node, LexNode):
        text = node.source or f"<lexeme of {node.dfa.num_states} DFA states>"
        if node.min_chars and node.max_chars is not None:
            return f"{text} ({node.min_chars}..{node.max_chars} chars)"
        if node.min_chars:
            return f"{text} (>= {node.min_chars} chars)"
        return f"{text} (<= {node.max_chars} chars)" if node.max_chars is not None else text
    if isinstance(node, ObjectNode):
        pairs = [f"{json.dumps(n)}{'' if n in node.required else '?'}: {name(v)}" for n, v in node.props.items()]
        for matched in sorted(node.pattern_nodes, key=sorted):
            pats = " & ".join(f"/{node.pattern_text[i]}/" if i < len(node.pattern_text) else f"/pattern {i}/"
                              for i in sorted(matched))
            pairs.append(f"{pats}*: {name(node.pattern_nodes[matched])}")
        if node.additional is not None:
            pairs.append(f"*: {name(node.additional)}")
        deps = "".join(f" ({json.dumps(k)} needs {', '.join(json.dumps(x) for x in sorted(v))})"
                       for k, v in node.deps.items())
        return (f'"{{" members({", ".join(pairs)}){_count(node.min_props, node.max_props)} "}}"'
                f"{' in order' if ordered and len(node.props) > 1 else ''}{deps}")
    if isinstance(node, ArrayNode):
        items = [name(p) for p in node.prefix] + ([f"{name(node.items)}*"] if node.items is not None else [])
        counted = ""
        if node.counts:   # per position: hit | miss, the hits counted
            ways = [f"{name(h) if h is not None else '-'} | {name(m) if m is not None else '-'}"
                    for h, m in zip(node.hits, node.misses)]
            counted = f" contains({'; '.join(ways)}){_count(node.min_contains, node.max_contains) or '{0,}'}"
        return f'"[" items({", ".join(items)}){_count(node.min_items, node.max_items)}{counted} "]"'
    if isinstance(node, UnionNode) and node.alts:
        return " | ".join(name(a) for a in node.alts)
    if isinstance(node, SeqNode):
        return " ".join(map(name, node.items)) if node.items else '""'
    return "<nothing>"


def _count(lo: int, hi: Optional[int]) -> str:
    if hi is None:
        return f"{{{lo},}}" if lo else ""
    return f"{{{lo},{hi}}}" if lo else f"{{,{hi}}}"
