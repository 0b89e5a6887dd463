"""`not`: the complement of a schema, written as positive keywords (an `anyOf` of pieces), or
UnsupportedSchemaError("not") naming what cannot be complemented exactly.

A schema is a conjunction of keywords, so its complement is the union of each keyword's failures: a value of
another kind, or of the keyword's kind that breaks it (`minimum: 3` fails as `{type: number,
exclusiveMaximum: 3}`). Keywords that act together (prefixItems/items, properties/additionalProperties,
if/then/else, contains/minContains) are complemented as groups. The pieces use three internal keywords the
lowerings honour: `$exclude` (values left out), `$notPattern` (strings matching none of the regexes),
`$notMultipleOf` (numbers that are multiples of none of the steps; step 1: not an integer) and `$absent`
(object names that must not appear)."""
from __future__ import annotations

from typing import Any

from ..errors import GrammarError, UnsupportedSchemaError
from .disjoint import disjoint
from .document import SchemaDocument
from .json_values import KINDS, json_kind
from .keywords import ANNOTATIONS, STANDARD_FORMATS, tuple_items, type_list

MAX_NEGATION_DEPTH = 24     # nested `not`s; only a recursive schema ($ref cycle) goes deeper
MAX_NEGATED_VALUES = 32     # enum values complemented one by one
NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# keywords with no effect on validity here (their group's keyword handles them, or they are annotations)
_PASSIVE = {"minContains", "maxContains", "then", "else", "additionalItems", "$defs", "definitions"}


def negate(doc: SchemaDocument, schema: Any, ptr: str, depth: int = 0) -> Any:
    """A schema matching exactly the JSON values `schema` (found at `ptr`) rejects."""
    if depth > MAX_NEGATION_DEPTH:
        raise UnsupportedSchemaError("not", ptr, "negation nested too deeply (a recursive schema?)")
    if schema is True:
        return False
    if schema is False:
        return True
    s, ptr = doc.deref(schema, ptr)
    if not isinstance(s, dict):
        raise GrammarError(f"schema at {ptr} must be an object or boolean, got {type(s).__name__}")
    pieces: list = []
    for k, v in s.items():
        if k in ANNOTATIONS or k in _PASSIVE or not doc.knows(k):
            continue
        pieces.extend(_keyword(doc, s, k, v, ptr, depth))
    if any(p is True or p == {} for p in pieces):
        return True
    pieces = [p for p in pieces if p is not False]
    if not pieces:
        return False
    return pieces[0] if len(pieces) == 1 else {"anyOf": pieces}


def _keyword(doc: SchemaDocument, s: dict, k: str, v: Any, ptr: str, depth: int) -> list:
    """The failures of keyword `k` (value `v`) of schema `s`, as a list of schemas."""
    def neg(sub, where):
        return negate(doc, sub, f"{ptr}/{where}", depth + 1)
    kp = f"{ptr}/{k}"
    if k == "type":
        return _not_type(type_list(v), ptr)
    if k in ("enum", "const"):
        return _not_values(doc, list(v) if k == "enum" else [v], kp, depth)
    if k == "$exclude":
        return [{"enum": list(v)}] if v else []
    if k == "$absent":
        return [{"type": "object", "required": [n]} for n in v]
    if k == "allOf":
        return [neg(sub, f"allOf/{i}") for i, sub in enumerate(v)]
    if k == "anyOf":
        return [{"allOf": [neg(sub, f"anyOf/{i}") for i, sub in enumerate(v)]}]
    if k == "oneOf":
        out = [{"allOf": [neg(sub, f"oneOf/{i}") for i, sub in enumerate(v)]}]
        for i in range(len(v)):           # or two alternatives matching at once
            for j in range(i + 1, len(v)):
                if not disjoint(doc, v[i], v[j], kp):
                    out.append({"allOf": [v[i], v[j]]})
        return out
    if k == "not":
        return [v]
    if k == "if":
        t, e = s.get("then", True), s.get("else", True)
        return [{"allOf": [v, neg(t, "then")]}, {"allOf": [neg(v, "if"), neg(e, "else")]}]
    if k in NUMERIC:
        return _not_bound(s, k, v)
    if k == "multipleOf":
        return [{"type": "number", "$notMultipleOf": [v]}]
    if k == "$notMultipleOf":
        return [{"type": "number", "multipleOf": x} for x in v]
    if k == "minLength":
        return [{"type": "string", "maxLength": v - 1}] if v > 0 else []
    if k == "maxLength":
        return [{"type": "string", "minLength": v + 1}]
    if k == "pattern":
        return [{"type": "string", "$notPattern": [v]}]
    if k == "$patterns":
        return [{"type": "string", "$notPattern": [p]} for p in v]
    if k == "$notPattern":
        return [{"type": "string", "pattern": p} for p in v]
    if k == "format":
        raise UnsupportedSchemaError("not", ptr, f"the complement of format {v!r} is not supported")
    if k == "minItems":
        return [{"type": "array", "maxItems": v - 1}] if v > 0 else []
    if k == "maxItems":
        return [{"type": "array", "minItems": v + 1}]
    if k == "minProperties":
        return [{"type": "object", "maxProperties": v - 1}] if v > 0 else []
    if k == "maxProperties":
        return [{"type": "object", "minProperties": v + 1}]
    if k in ("prefixItems", "items"):
        if k == "items" and "prefixItems" in s:
            return []      # complemented with prefixItems
        return _not_items(doc, s, ptr, depth)
    if k == "contains":
        lo, hi = s.get("minContains", 1), s.get("maxContains")
        if hi is None and lo == 1:
            return [{"type": "array", "items": neg(v, "contains")}]
        if hi is None and lo == 0:
            return []
        raise UnsupportedSchemaError("not", ptr, "the complement of minContains/maxContains is not supported")
    if k == "uniqueItems":
        if v is False:
            return []
        raise UnsupportedSchemaError("not", ptr, "the complement of uniqueItems is not supported")
    if k == "required":
        return [{"type": "object", "$absent": [r]} for r in v]
    if k == "dependentRequired":
        return [{"type": "object", "required": [a], "$absent": [b]} for a, bs in v.items() for b in bs]
    if k == "dependentSchemas":
        return [{"allOf": [{"type": "object", "required": [a]}, neg(sub, f"dependentSchemas/{a}")]}
                for a, sub in v.items()]
    if k == "dependencies":
        out = []
        for a, sub in v.items():
            if isinstance(sub, list):
                out.extend({"type": "object", "required": [a], "$absent": [b]} for b in sub)
            else:
                out.append({"allOf": [{"type": "object", "required": [a]}, neg(sub, f"dependencies/{a}")]})
        return out
    if k in ("properties", "patternProperties", "additionalProperties"):
        first = next(x for x in ("properties", "patternProperties", "additionalProperties") if x in s)
        return _not_properties(doc, s, ptr, depth) if k == first else []
    if k == "propertyNames":
        return _not_property_names(doc, v, ptr, depth)
    if k in ("$ref", "$dynamicRef", "$recursiveRef", "unevaluatedProperties", "unevaluatedItems"):
        raise UnsupportedSchemaError("not", ptr, f"the complement of {k!r} is not supported")
    return []   # not a validation keyword: an annotation


def _not_type(types: list, ptr: str) -> list:
    kinds = {"number" if t == "integer" else t for t in types}
    others = [k for k in KINDS if k not in kinds]
    out = [{"type": others}] if others else []
    if "integer" in types and "number" not in types:
        out.append({"type": "number", "$notMultipleOf": [1]})
    return out


def _not_values(doc: SchemaDocument, values: list, ptr: str, depth: int) -> list:
    """Every JSON value equal to none of `values`."""
    if len(values) > MAX_NEGATED_VALUES:
        raise UnsupportedSchemaError("not", ptr, f"more than {MAX_NEGATED_VALUES} values to exclude")
    by_kind: dict[str, list] = {}
    for x in values:
        by_kind.setdefault(json_kind(x), []).append(x)
    out: list = []
    others = [k for k in KINDS if k not in by_kind]
    if others:
        out.append({"type": others})
    for kind in ("string", "boolean"):
        if kind in by_kind:
            out.append({"type": kind, "$exclude": by_kind[kind]})
    if "number" in by_kind:
        xs = sorted(set(by_kind["number"]))
        out.append({"type": "number", "exclusiveMaximum": xs[0]})
        out.extend({"type": "number", "exclusiveMinimum": a, "exclusiveMaximum": b} for a, b in zip(xs, xs[1:]))
        out.append({"type": "number", "exclusiveMinimum": xs[-1]})
    for kind, one in (("array", _not_array_value), ("object", _not_object_value)):
        if kind in by_kind:
            parts = [{"anyOf": one(doc, x, ptr, depth)} for x in by_kind[kind]]
            out.append(parts[0] if len(parts) == 1 else {"allOf": parts})
    return out


def _not_array_value(doc: SchemaDocument, a: list, ptr: str, depth: int) -> list:
    """Arrays other than `a`: another length, or some item different."""
    n = len(a)
    out: list = [{"type": "array", "minItems": n + 1}]
    if n:
        out.append({"type": "array", "maxItems": n - 1})
    for i, x in enumerate(a):
        out.append({"type": "array", "minItems": i + 1,
                    "prefixItems": [True] * i + [negate(doc, {"const": x}, ptr, depth + 1)]})
    return out


def _not_object_value(doc: SchemaDocument, o: dict, ptr: str, depth: int) -> list:
    """Objects other than `o`: a name missing, a name more, or some value different."""
    out: list = [{"type": "object", "minProperties": len(o) + 1}]
    for name, x in o.items():
        out.append({"type": "object", "$absent": [name]})
        out.append({"type": "object", "required": [name],
                    "properties": {name: negate(doc, {"const": x}, ptr, depth + 1)}})
    return out


def _not_bound(s: dict, k: str, v: Any) -> list:
    if isinstance(v, bool):
        return []      # draft-04 exclusiveMinimum/Maximum: complemented with minimum/maximum
    lower = k in ("minimum", "exclusiveMinimum")
    exclusive = k.startswith("exclusive") or s.get("exclusiveMinimum" if lower else "exclusiveMaximum") is True
    if lower:
        return [{"type": "number", "maximum" if exclusive else "exclusiveMaximum": v}]
    return [{"type": "number", "minimum" if exclusive else "exclusiveMinimum": v}]


def _not_items(doc: SchemaDocument, s: dict, ptr: str, depth: int) -> list:
    """Arrays with an item breaking its positional schema, or with an item past the prefix breaking `items`."""
    prefix, tail = tuple_items(s)
    out: list = []
    for i, p in enumerate(prefix):
        np_ = negate(doc, p, f"{ptr}/prefixItems/{i}", depth + 1)
        if np_ is not False:
            out.append({"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [np_]})
    nt = negate(doc, tail, f"{ptr}/items", depth + 1)
    if nt is True:
        out.append({"type": "array", "minItems": len(prefix) + 1})
    elif nt is not False:
        raise UnsupportedSchemaError("not", ptr, "the complement of items (some item breaking it) is not "
                                     "supported unless items is true or false")
    return out


def _not_properties(doc: SchemaDocument, s: dict, ptr: str, depth: int) -> list:
    """Objects with a named property whose value breaks its schema (and the patterns its name matches);
    patternProperties and additionalProperties must be trivial (their complement needs "some other name")."""
    for k in ("patternProperties", "additionalProperties"):
        for sub in ((s.get(k) or {}).values() if k == "patternProperties" else [s.get(k, True)]):
            if negate(doc, sub, f"{ptr}/{k}", depth + 1) is not False:
                raise UnsupportedSchemaError("not", ptr, f"the complement of {k} is not supported")
    out: list = []
    for name, sub in s.get("properties", {}).items():
        ns = negate(doc, sub, f"{ptr}/properties/{name}", depth + 1)
        if ns is not False:
            out.append({"type": "object", "required": [name], "properties": {name: ns}})
    return out


def _not_property_names(doc: SchemaDocument, names: Any, ptr: str, depth: int) -> list:
    """Objects with a name breaking `names`: expressible when the names breaking it are finitely many."""
    nn = negate(doc, names, f"{ptr}/propertyNames", depth + 1)
    if nn is False:
        return []
    if isinstance(nn, dict):
        vals = nn.get("enum", [nn["const"]] if "const" in nn else None)
        if vals is not None and set(nn) <= {"enum", "const"}:
            return [{"type": "object", "required": [x]} for x in vals if isinstance(x, str)]
    raise UnsupportedSchemaError("not", ptr, "the complement of propertyNames is supported only when the "
                                 "names it rejects are listed (propertyNames: {not: {enum: [...]}})")

