"""allOf -> one schema, merged keyword by keyword. Objects merge property-wise, each side's
additionalProperties applying to the other side's extra names; arrays merge position-wise; anyOf/oneOf are
distributed: (A and (B1 or B2)) = (A and B1) or (A and B2). Keywords that cannot be intersected exactly
raise UnsupportedSchemaError("allOf")."""
from __future__ import annotations

from typing import Any

from ..errors import GrammarError, UnsupportedSchemaError
from .disjoint import check_disjoint
from .document import SchemaDocument
from .json_values import json_equal, json_in
from .keywords import ANNOTATIONS, constraints, type_list

MAX_MERGE_DEPTH = 64     # nested merges; only recursive schemas ($ref cycles) get this deep
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
    a, _ = doc.deref(a, ptr)
    b, _ = doc.deref(b, ptr)
    for d in (a, b):
        if "allOf" in d:
            return merge(doc, merge_all(doc, d, ptr, depth), b if d is a else a, ptr, depth + 1)
    for kw in ("anyOf", "oneOf"):
        for x, y in ((a, b), (b, a)):
            if kw in x:
                if kw == "oneOf":
                    check_disjoint(doc, x["oneOf"], ptr)
                xr = {k: v for k, v in x.items() if k != kw}
                base = merge(doc, xr, y, ptr, depth + 1) if xr else y
                return {"anyOf": [merge(doc, base, alt, ptr, depth + 1) for alt in x[kw]]}
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
        elif k == "required":
            out[k] = list(dict.fromkeys(list(u) + list(v)))
        elif k == "enum":
            out[k] = [x for x in u if json_in(x, v)]
        elif k == "const":
            if not json_equal(u, v):
                return {"type": []}
        elif json_equal(u, v):
            continue
        elif k in ("properties", "additionalProperties", "items", "prefixItems"):
            continue   # merged below, from both sides
        else:
            raise UnsupportedSchemaError("allOf", ptr, f"cannot merge differing {k!r} values")
    if ("patternProperties" in a or "patternProperties" in b) and any(
            k in x for x in (a, b) for k in ("properties", "additionalProperties")):
        raise UnsupportedSchemaError("allOf", ptr, "cannot merge patternProperties with properties")
    if any(k in a or k in b for k in ("properties", "additionalProperties")):
        pa, pb = a.get("properties", {}), b.get("properties", {})
        aa, ab = a.get("additionalProperties", True), b.get("additionalProperties", True)
        props = {}
        for name in list(pa) + [n for n in pb if n not in pa]:
            props[name] = merge(doc, pa.get(name, aa), pb.get(name, ab), ptr, depth + 1)
        out["properties"] = props
        if "additionalProperties" in a or "additionalProperties" in b:
            # (left out when neither side says: absent is `true`, and generation's closed objects still apply)
            out["additionalProperties"] = merge(doc, aa, ab, ptr, depth + 1)
    if any(k in a or k in b for k in ("items", "prefixItems")):
        xa, ia = _tuple_items(a)
        xb, ib = _tuple_items(b)
        n = max(len(xa), len(xb))
        out["prefixItems"] = [merge(doc, xa[i] if i < len(xa) else ia, xb[i] if i < len(xb) else ib, ptr,
                                    depth + 1) for i in range(n)]
        out["items"] = merge(doc, ia, ib, ptr, depth + 1)
        out.pop("additionalItems", None)
    if "enum" in out and "const" in out:
        c = out.pop("const")
        out["enum"] = [x for x in out["enum"] if json_equal(x, c)]
    return out


def _tuple_items(s: dict) -> tuple[list, Any]:
    """(positional item schemas, schema of the items past them), from either the 2020-12 form
    (prefixItems + items) or the draft <= 2019 form (items array + additionalItems)."""
    if isinstance(s.get("items"), list):
        return list(s["items"]), s.get("additionalItems", True)
    return list(s.get("prefixItems", [])), s.get("items", True)
