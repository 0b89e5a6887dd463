"""allOf -> one schema, merged keyword by keyword. Objects merge property-wise, each side's
additionalProperties applying to the other side's extra names; arrays merge position-wise; anyOf/oneOf are
distributed: (A and (B1 or B2)) = (A and B1) or (A and B2). Keywords that cannot be intersected exactly
raise UnsupportedSchemaError("allOf")."""
from __future__ import annotations

from typing import Any

from ..automata.regex import RegexUnsupported, regex_to_char_fsm
from ..errors import GrammarError, UnsupportedSchemaError
from .disjoint import check_disjoint
from .document import SchemaDocument
from .json_values import json_equal, json_in
from .keywords import ANNOTATIONS, constraints, tuple_items, type_list
from .rewrite import needs_rewrite, rewrite

MAX_MERGE_DEPTH = 64     # nested merges; only recursive schemas ($ref cycles) get this deep
MAX_ALTERNATIVES = 64    # anyOf alternatives an intersection may expand to
# internal keywords holding lists of conditions that all apply (see negation.py): merged by concatenation
LIST_KEYWORDS = ("$exclude", "$notPattern", "$patterns", "$notMultipleOf", "$absent")
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def merge_all(doc: SchemaDocument, schema: dict, ptr: str, depth: int = 0) -> dict:
    """`schema` (which has `allOf`) as one schema without `allOf`. `depth`: merges already in progress."""
    parts = []
    rest = {k: v for k, v in schema.items() if k != "allOf"}
    subs = schema["allOf"]
    if not isinstance(subs, list) or not subs:
        raise GrammarError(f"allOf at {ptr} must be a non-empty array")
    for i, sub in enumerate(subs):
        d, _ = doc.deref(sub, f"{ptr}/allOf/{i}")
        if isinstance(d, dict) and "allOf" in d:
            d = merge_all(doc, d, f"{ptr}/allOf/{i}", depth)
        parts.append(d)
    if rest:
        parts.append(rest)
    out: Any = True
    for p in parts:
        out = merge(doc, out, p, ptr, depth + 1)
    if out is True:
        return {}
    if out is False:
        return {"type": []}
    return out


def merge(doc: SchemaDocument, a: Any, b: Any, ptr: str, depth: int) -> Any:
    """A schema matching exactly the values that match both `a` and `b`. `depth` counts this merge and
    the merges enclosing it."""
    if depth > MAX_MERGE_DEPTH:
        raise UnsupportedSchemaError("allOf", ptr, "recursive schemas cannot be merged")
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    a = rewrite(doc, a, ptr) if needs_rewrite(a) else a     # (before deref: unevaluated* sees into a $ref)
    b = rewrite(doc, b, ptr) if needs_rewrite(b) else b
    a, _ = doc.deref(a, ptr)
    b, _ = doc.deref(b, ptr)
    a = rewrite(doc, a, ptr) if needs_rewrite(a) else a
    b = rewrite(doc, b, ptr) if needs_rewrite(b) else b
    if a is False or b is False:
        return False
    for d in (a, b):
        if d is True or d == {}:
            return b if d is a else a
        if "allOf" in d:
            return merge(doc, merge_all(doc, d, ptr, depth), b if d is a else a, ptr, depth + 1)
    for kw in ("anyOf", "oneOf"):
        for x, y in ((a, b), (b, a)):
            if kw in x:
                if kw == "oneOf":
                    check_disjoint(doc, x["oneOf"], ptr)
                xr = {k: v for k, v in x.items() if k != kw}
                base = merge(doc, xr, y, ptr, depth + 1) if xr else y
                alts = []
                for alt in x[kw]:
                    m = merge(doc, base, alt, ptr, depth + 1)
                    if m is False:
                        continue
                    alts.extend(m["anyOf"] if isinstance(m, dict) and set(m) == {"anyOf"} else [m])
                if len(alts) > MAX_ALTERNATIVES:
                    raise UnsupportedSchemaError("allOf", ptr, f"the intersection has more than "
                                                 f"{MAX_ALTERNATIVES} alternatives")
                return {"anyOf": alts} if alts else False
    out = constraints(a)
    for k, v in b.items():
        if k in ANNOTATIONS:
            continue
        if k not in out:
            out[k] = v
            continue
        u = out[k]
        if k == "type":
            ta, tb = set(type_list(u)), set(type_list(v))
            t = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or
                             ("number" in ta and "integer" in tb) else set())
            out[k] = sorted(t)
        elif k in LOWER_BOUNDS and not isinstance(u, bool) and not isinstance(v, bool):
            out[k] = max(u, v)
        elif k in UPPER_BOUNDS and not isinstance(u, bool) and not isinstance(v, bool):
            out[k] = min(u, v)
        elif k == "required" or k in LIST_KEYWORDS:
            out[k] = list(u) + [x for x in v if not json_in(x, u)]
        elif k == "pattern":
            if u != v:
                out["$patterns"] = list(out.get("$patterns", [])) + [v]
        elif k == "multipleOf":
            out[k] = _lcm(u, v)
        elif k == "uniqueItems":
            out[k] = bool(u or v)
        elif k == "propertyNames":
            out[k] = merge(doc, u, v, ptr, depth + 1)
        elif k in ("dependentRequired", "dependencies") and isinstance(u, dict) and isinstance(v, dict):
            out[k] = {n: list(dict.fromkeys(list(u.get(n, [])) + list(v.get(n, [])))) for n in {**u, **v}}
            if any(not isinstance(x, list) for x in (*u.values(), *v.values())):
                raise UnsupportedSchemaError("allOf", ptr, f"cannot merge {k!r} with schema values")
        elif k == "enum":
            out[k] = [x for x in u if json_in(x, v)]
        elif k == "const":
            if not json_equal(u, v):
                return {"type": []}
        elif json_equal(u, v):
            continue
        elif k in ("properties", "additionalProperties", "patternProperties", "items", "prefixItems"):
            continue   # merged below, from both sides
        else:
            raise UnsupportedSchemaError("allOf", ptr, f"cannot merge differing {k!r} values")
    if any(k in a or k in b for k in ("properties", "additionalProperties", "patternProperties")):
        _merge_properties(doc, a, b, out, ptr, depth)
    if any(k in a or k in b for k in ("items", "prefixItems")):
        xa, ia = tuple_items(a)
        xb, ib = tuple_items(b)
        n = max(len(xa), len(xb))
        out["prefixItems"] = [merge(doc, xa[i] if i < len(xa) else ia, xb[i] if i < len(xb) else ib, ptr,
                                    depth + 1) for i in range(n)]
        out["items"] = merge(doc, ia, ib, ptr, depth + 1)
        out.pop("additionalItems", None)
    if "enum" in out and "const" in out:
        c = out.pop("const")
        out["enum"] = [x for x in out["enum"] if json_equal(x, c)]
    return out


def _merge_properties(doc: SchemaDocument, a: dict, b: dict, out: dict, ptr: str, depth: int) -> None:
    """properties / patternProperties / additionalProperties of both sides into `out`. A name one side does
    not list gets that side's additionalProperties unless one of its patterns matches (the patterns are kept
    and apply to it anyway). Exact when every pattern of a side lies among the patterns of each side with a
    non-trivial additionalProperties (else a name could match a pattern of one side and be "additional" to
    the other, which one node cannot say)."""
    pa, pb = a.get("properties", {}), b.get("properties", {})
    aa, ab = a.get("additionalProperties", True), b.get("additionalProperties", True)
    qa, qb = a.get("patternProperties") or {}, b.get("patternProperties") or {}
    for x, qx, qy in ((aa, qa, qb), (ab, qb, qa)):
        if not (x is True or x == {}) and not set(qy) <= set(qx):
            raise UnsupportedSchemaError("allOf", ptr, "cannot merge patternProperties with the other side's "
                                         "additionalProperties")

    def side(props, add, pats, name):
        if name in props:
            return props[name]
        try:
            if any(regex_to_char_fsm(p, True).matches(name) for p in pats):
                return True
        except RegexUnsupported as e:
            raise UnsupportedSchemaError("patternProperties", ptr, str(e)) from None
        return add
    props = {}
    for name in list(pa) + [n for n in pb if n not in pa]:
        props[name] = merge(doc, side(pa, aa, qa, name), side(pb, ab, qb, name), ptr, depth + 1)
    if props or "properties" in a or "properties" in b:
        out["properties"] = props
    if qa or qb:
        out["patternProperties"] = {p: merge(doc, qa.get(p, True), qb.get(p, True), ptr, depth + 1)
                                    for p in list(qa) + [p for p in qb if p not in qa]}
    if "additionalProperties" in a or "additionalProperties" in b:
        # (left out when neither side says: absent is `true`, and generation's closed objects still apply)
        out["additionalProperties"] = merge(doc, aa, ab, ptr, depth + 1)


def _lcm(u: Any, v: Any) -> Any:
    """The least common multiple of two multipleOf steps, exactly (decimal steps as Decimal)."""
    from decimal import Decimal
    from fractions import Fraction
    from math import gcd
    fu, fv = (Fraction(repr(x)) if isinstance(x, float) else Fraction(x) for x in (u, v))
    num = fu.numerator * fv.numerator // gcd(fu.numerator, fv.numerator)
    r = Fraction(num, gcd(fu.denominator, fv.denominator))
    return int(r) if r.denominator == 1 else Decimal(r.numerator) / Decimal(r.denominator)
