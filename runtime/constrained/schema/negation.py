"""`not`, rewritten into positive keywords where that is exact; any other `not` is UnsupportedSchemaError."""
from __future__ import annotations

from ..errors import UnsupportedSchemaError
from .document import SchemaDocument
from .json_values import json_kind
from .keywords import TYPES, constraints, type_kinds, type_list


def apply_not(doc: SchemaDocument, schema: dict, ptr: str) -> dict:
    """`schema` without its `not`: not true/{}/false, not {type}, and not {enum/const} of strings, booleans
    and null. Excluded values go to the internal keyword `$exclude` (a list the lowerings honour)."""
    neg, _ = doc.deref(schema["not"], f"{ptr}/not")
    out = {k: v for k, v in schema.items() if k != "not"}
    if isinstance(neg, dict):
        neg = constraints(neg)
    if neg is True or neg == {}:
        return {"type": []}
    if neg is False:
        return out
    if set(neg) == {"type"}:
        t = type_list(neg["type"])
        cur = set(type_list(out.get("type", sorted(TYPES))))
        if "integer" in cur and "number" in cur:
            cur.discard("integer")
        if "integer" in t and "number" in cur and "number" not in t:
            raise UnsupportedSchemaError("not", ptr, "'not integer' over numbers is not supported")
        out["type"] = sorted(x for x in cur if x not in t and not (x == "integer" and "number" in t))
        return out
    if set(neg) <= {"enum", "const", "type"} and ("enum" in neg or "const" in neg):
        vals = list(neg["enum"]) if "enum" in neg else [neg["const"]]
        if "type" in neg:
            vals = [v for v in vals if json_kind(v) in type_kinds(type_list(neg["type"]))]
        excl = list(out.get("$exclude", []))
        for v in vals:
            if json_kind(v) not in ("string", "null", "boolean"):
                raise UnsupportedSchemaError("not", ptr, "only strings, booleans and null can be excluded")
            excl.append(v)
        out["$exclude"] = excl
        return out
    raise UnsupportedSchemaError("not", ptr, "only not {type}, not {enum/const} of strings/booleans/null "
                                 "and not true/false are supported")
