"""Lowering of finite value sets: `null`, `boolean`, and `enum`/`const` (one node per distinct value, the
schema's other keywords applied to the values up front)."""
from __future__ import annotations

import json
from typing import Any

from ..automata import rx
from ..automata.key_dfa import words_dfa
from ..ir.nodes import ArrayNode, LexNode, ObjectNode, UnionNode
from .json_values import json_equal, json_key
from .keywords import constraints
from .lowerer import Lowerer
from .numbers import literal_numbers
from .standard import valid


def lower_null(sc: Lowerer, s: dict, ptr: str) -> int:
    if any(v is None for v in s.get("$exclude", [])):
        return sc.never()
    return sc.lex(rx.Lit("null"), '"null"')


def lower_boolean(sc: Lowerer, s: dict, ptr: str) -> int:
    ex = [v for v in s.get("$exclude", []) if isinstance(v, bool)]
    opts = [w for w, v in (("true", True), ("false", False)) if v not in ex]
    return sc.lex(rx.words(opts), " | ".join(f'"{w}"' for w in opts)) if opts else sc.never()


def lower_enum(sc: Lowerer, s: dict, ptr: str) -> int:
    """A schema with `enum` and/or `const`: the listed values that also satisfy every other keyword."""
    values = list(s["enum"]) if "enum" in s else [s["const"]]
    if "enum" in s and "const" in s:
        values = [v for v in values if json_equal(v, s["const"])]
    excluded = {json_key(v) for v in s.get("$exclude", [])}
    values = [v for v in values if json_key(v) not in excluded]
    rest = constraints(s, "enum", "const", "$exclude")
    if rest:
        values = [x for x in values if valid(sc.doc, rest, x, ptr)]
    first: dict = {}
    for v in values:
        first.setdefault(json_key(v), v)   # the first of equal values
    uniq = list(first.values())
    # the strings share one lexeme (a trie), and so do the numbers: one automaton to build and to walk for
    # each mask instead of one per value (enums of hundreds of names were a third of MaskBench's compile time)
    strings = [v for v in uniq if isinstance(v, str)]
    numbers = [v for v in uniq if isinstance(v, (int, float)) and not isinstance(v, bool)]
    ids = [const_node(sc, v) for v in uniq if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
    if len(strings) > 1:
        d = sc.dfa(("lits", frozenset(strings)), lambda: words_dfa(dict.fromkeys(strings, True), None,
                                                                   canonical=sc.canonical))
        ids.append(sc.add(LexNode(d, source=" | ".join(json.dumps(json.dumps(v)) for v in strings))))
    elif strings:
        ids.append(const_node(sc, strings[0]))
    # the numbers: one lexeme, with the exponent spellings (1e0 for 1) of every number path in the exact matcher
    if numbers:
        ids.append(literal_numbers(sc, numbers))
    if not ids:
        return sc.never()
    return ids[0] if len(ids) == 1 else sc.add(UnionNode(tuple(ids)))


def const_node(sc: Lowerer, v: Any) -> int:
    """A node matching exactly the JSON value `v`: an object needs all of its keys and no others."""
    if v is None:
        return sc.lex(rx.Lit("null"), '"null"')
    if isinstance(v, bool):
        return sc.lex(rx.Lit("true" if v else "false"), '"true"' if v else '"false"')
    if isinstance(v, (int, float)):
        return literal_numbers(sc, [v])
    if isinstance(v, str):
        d = sc.dfa(("lit", v), lambda: words_dfa({v: True}, None, canonical=sc.canonical))
        return sc.add(LexNode(d, source=json.dumps(json.dumps(v))))
    if isinstance(v, list):
        return sc.add(ArrayNode(tuple(const_node(sc, x) for x in v), None, len(v), len(v)))
    props = {k: const_node(sc, x) for k, x in v.items()}
    return sc.add(ObjectNode(props, frozenset(props), None))
