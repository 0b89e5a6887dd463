"""The JSON Schema vocabulary the compiler knows: which keywords are annotations (no effect on validity),
which it refuses (UnsupportedSchemaError naming keyword and JSON pointer), and the type names."""
from __future__ import annotations

from typing import Any

from ..errors import UnsupportedSchemaError

ANNOTATIONS = {"title", "description", "examples", "default", "$comment", "$schema", "$id", "deprecated",
               "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "$defs",
               "definitions", "$anchor", "$dynamicAnchor", "$vocabulary"}
UNSUPPORTED = {"$dynamicRef", "$recursiveRef", "$recursiveAnchor"}
TYPES = {"null", "boolean", "integer", "number", "string", "array", "object"}
# formats defined by JSON Schema (other "format" values on a string are refused as unknown, not ignored)
STANDARD_FORMATS = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
                    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
                    "json-pointer", "relative-json-pointer", "regex"}


def check_supported(schema: dict, ptr: str) -> None:
    """Raises UnsupportedSchemaError for the first keyword of `schema` that cannot be enforced exactly."""
    for k in schema:
        if k in UNSUPPORTED:
            raise UnsupportedSchemaError(k, ptr)


def constraints(schema: dict, *drop: str) -> dict:
    """`schema` without its annotations and without the keywords in `drop` (key order kept)."""
    return {k: v for k, v in schema.items() if k not in drop and k not in ANNOTATIONS}


def type_list(t: Any) -> list:
    """The value of a `type` keyword as a list of names."""
    return t if isinstance(t, list) else [t]


def type_kinds(types: list) -> set[str]:
    """JSON value kinds that the type names admit ("integer" is a number kind)."""
    return {"number" if x == "integer" else x for x in types}


def tuple_items(s: dict) -> tuple[list, Any]:
    """(positional item schemas, schema of the items past them), from either the 2020-12 form
    (prefixItems + items) or the draft <= 2019 form (items array + additionalItems)."""
    if isinstance(s.get("items"), list):
        return list(s["items"]), s.get("additionalItems", True)
    return list(s.get("prefixItems", [])), s.get("items", True)
