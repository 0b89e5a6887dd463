"""unevaluatedProperties / unevaluatedItems, resolved statically.

Which names (positions) a schema evaluates depends on which of its in-place sub-schemas (allOf, anyOf, oneOf,
if/then/else, dependentSchemas, $ref) validate. We list the cases: each is a set of conditions (the anyOf
alternatives taken, `if` valid or not, a dependent name present or not) and what is evaluated under them. The
keyword then becomes

    allOf[schema without it, anyOf[allOf[conditions of case c, closure of c] for each case c]]

where the closure of a case is `{properties: {evaluated names: true}, patternProperties: {its patterns: true},
additionalProperties: U}` (for items: `{prefixItems: [true] * n, items: anyOf[U, each in-place contains]}`:
an item a `contains` matched is evaluated). For anyOf every non-empty subset of alternatives is a case (all
valid ones contribute); cases that evaluate the same are merged, and a single case needs no conditions."""
from __future__ import annotations

import json
from itertools import combinations
from typing import Any, NamedTuple

from ..errors import UnsupportedSchemaError
from .disjoint import disjoint
from .document import SchemaDocument
from .keywords import constraints
from .negation import negate

MAX_CASES = 16
MAX_DEPTH = 16


class Case(NamedTuple):
    conds: tuple = ()               # schemas that select this case
    names: frozenset = frozenset()  # property names evaluated
    pats: frozenset = frozenset()   # patternProperties regexes evaluated
    all_props: bool = False         # every property evaluated (additionalProperties, nested unevaluated*)
    nitems: int = 0                 # leading positions evaluated (prefixItems)
    all_items: bool = False         # every item evaluated (items, nested unevaluatedItems)
    contains: tuple = ()            # contains schemas: the items they match are evaluated

    def evaluates(self) -> tuple:
        return (self.names, self.pats, self.all_props, self.nitems, self.all_items,
                json.dumps(self.contains, sort_keys=True, default=str))


def _join(a: Case, b: Case) -> Case:
    return Case(a.conds + b.conds, a.names | b.names, a.pats | b.pats, a.all_props or b.all_props,
                max(a.nitems, b.nitems), a.all_items or b.all_items,
                a.contains + tuple(c for c in b.contains if c not in a.contains))


def _product(xs: list[Case], ys: list[Case], ptr: str) -> list[Case]:
    out = [_join(x, y) for x in xs for y in ys]
    if len(out) > MAX_CASES:
        raise UnsupportedSchemaError("unevaluatedProperties", ptr,
                                     f"more than {MAX_CASES} cases of evaluated properties/items")
    return out


def resolve_unevaluated(doc: SchemaDocument, s: dict, ptr: str) -> Any:
    """`s` with unevaluatedProperties/unevaluatedItems replaced by what they mean here."""
    up = s.get("unevaluatedProperties", True)
    ui = s.get("unevaluatedItems", True)
    rest = {k: v for k, v in s.items() if k not in ("unevaluatedProperties", "unevaluatedItems")}
    if (up is True or up == {}) and (ui is True or ui == {}):
        return rest
    cases = _cases(doc, rest, ptr, 0)
    # merge cases that evaluate the same; one case left needs no conditions
    if len({c.evaluates() for c in cases}) == 1:
        cases = [Case((), *cases[0][1:])]
    alts = []
    for c in cases:
        conds = []
        for cond in c.conds:
            if isinstance(cond, tuple):       # ("not", schema, ptr): a case that holds when schema fails
                try:
                    conds.append(negate(doc, cond[1], cond[2]))
                except UnsupportedSchemaError as e:
                    kw = "unevaluatedProperties" if "unevaluatedProperties" in s else "unevaluatedItems"
                    raise UnsupportedSchemaError(kw, ptr, f"which names are evaluated depends on {e.pointer} "
                                                 "failing, and its complement is not supported") from None
            else:
                conds.append(cond)
        alts.append({"allOf": conds + [_closure(c, up, ui)]} if conds else _closure(c, up, ui))
    extra = alts[0] if len(alts) == 1 else {"anyOf": alts}
    return {"allOf": [rest, extra]} if rest else extra


def _closure(c: Case, up: Any, ui: Any) -> dict:
    out: dict = {}
    if not (up is True or up == {}) and not c.all_props:
        out["properties"] = {n: True for n in sorted(c.names)}
        if c.pats:
            out["patternProperties"] = {p: True for p in sorted(c.pats)}
        out["additionalProperties"] = up
    if not (ui is True or ui == {}) and not c.all_items:
        if c.nitems:
            out["prefixItems"] = [True] * c.nitems
        out["items"] = {"anyOf": [ui, *c.contains]} if c.contains else ui
    return out


def _cases(doc: SchemaDocument, s: Any, ptr: str, depth: int, top: bool = True) -> list[Case]:
    """What `s` evaluates in place, by case. `top`: `s` is the schema whose unevaluated* is being resolved (its
    own unevaluated* keywords were removed; a nested one evaluates everything)."""
    if depth > MAX_DEPTH:
        raise UnsupportedSchemaError("unevaluatedProperties", ptr, "in-place references nest too deeply")
    if s is True or s is False or not isinstance(s, dict):
        return [Case()]
    if "$ref" in s:
        target, tptr = doc.resolve(s["$ref"], ptr)
        ref_cases = _cases(doc, target, tptr, depth + 1, top=False)
        rest = doc.ref_siblings(s)
        return _product(ref_cases, _cases(doc, rest, ptr, depth + 1, top), ptr) if rest else ref_cases
    s = {k: v for k, v in constraints(s).items() if doc.knows(k)}
    prefix = s.get("prefixItems")
    items = s.get("items")
    if isinstance(items, list):               # draft <= 2019 tuple form
        prefix, items = items, s.get("additionalItems")
    base = Case(names=frozenset(s.get("properties", {})), pats=frozenset(s.get("patternProperties", {})),
                all_props="additionalProperties" in s or (not top and "unevaluatedProperties" in s),
                nitems=len(prefix or []),
                all_items=items is not None or (not top and "unevaluatedItems" in s),
                contains=(s["contains"],) if "contains" in s else ())
    cases = [base]
    for i, sub in enumerate(s.get("allOf", [])):
        cases = _product(cases, _cases(doc, sub, f"{ptr}/allOf/{i}", depth + 1, False), ptr)
    for kw in ("anyOf", "oneOf"):
        if kw in s:
            cases = _product(cases, _branches(doc, s[kw], f"{ptr}/{kw}", depth, kw == "oneOf"), ptr)
    if "if" in s:
        cond = s["if"]
        yes = _product(_cases(doc, cond, f"{ptr}/if", depth + 1, False),
                       _cases(doc, s.get("then", True), f"{ptr}/then", depth + 1, False), ptr)
        no = _cases(doc, s.get("else", True), f"{ptr}/else", depth + 1, False)
        if {c.evaluates() for c in yes} != {c.evaluates() for c in no}:
            yes = [c._replace(conds=(cond,) + c.conds) for c in yes]
            no = [c._replace(conds=(("not", cond, f"{ptr}/if"),) + c.conds) for c in no]
        cases = _product(cases, yes + no, ptr)
    deps = dict(s.get("dependentSchemas") or {})
    deps.update({k: v for k, v in (s.get("dependencies") or {}).items() if not isinstance(v, list)})
    for name, sub in deps.items():
        present = _cases(doc, sub, f"{ptr}/dependentSchemas/{name}", depth + 1, False)
        if {c.evaluates() for c in present} != {Case().evaluates()}:
            present = [c._replace(conds=({"required": [name]},) + c.conds) for c in present]
            cases = _product(cases, present + [Case(conds=({"$absent": [name]},))], ptr)
    return cases


def _branches(doc: SchemaDocument, alts: list, ptr: str, depth: int, one: bool) -> list[Case]:
    """Cases of anyOf/oneOf: the valid alternatives all contribute, so for anyOf each non-empty subset of
    them is a case (only single ones when no two can both hold, as for oneOf)."""
    per = [[c._replace(conds=(a,) + c.conds) for c in _cases(doc, a, f"{ptr}/{i}", depth + 1, False)]
           for i, a in enumerate(alts)]
    if len({c.evaluates() for cs in per for c in cs}) == 1:
        return [Case((), *per[0][0][1:])]      # every alternative evaluates the same: no condition needed
    single = one or all(disjoint(doc, alts[i], alts[j], ptr)
                        for i in range(len(alts)) for j in range(i + 1, len(alts)))
    out: list[Case] = []
    for k in range(1, 2 if single else len(alts) + 1):
        for subset in combinations(range(len(alts)), k):
            acc = [Case()]
            for i in subset:
                acc = _product(acc, per[i], ptr)
            out.extend(acc)
            if len(out) > MAX_CASES:
                raise UnsupportedSchemaError("unevaluatedProperties", ptr,
                                             f"more than {MAX_CASES} combinations of anyOf alternatives")
    return out
