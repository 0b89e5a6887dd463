"""The JSON Schema vocabulary the compiler knows: which keywords are annotations (no effect on validity),
which it refuses (UnsupportedSchemaError naming keyword and JSON pointer), and the type names."""
from __future__ import annotations

from typing import Any

from ..errors import GrammarError, UnsupportedSchemaError

ANNOTATIONS = {"title", "description", "examples", "default", "$comment", "$schema", "$id", "deprecated",
               "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "$defs",
               "definitions", "$anchor", "$dynamicAnchor", "$vocabulary"}
UNSUPPORTED = {"$dynamicRef", "$recursiveRef", "$recursiveAnchor"}
TYPES = {"null", "boolean", "integer", "number", "string", "array", "object"}
# formats defined by JSON Schema (other "format" values on a string are refused as unknown, not ignored)
STANDARD_FORMATS = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
                    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
                    "json-pointer", "relative-json-pointer", "regex"}


# grounding extensions: a value taken from a source text (the document), resolved by the program into
# {"text": ...} before the schema is compiled (sglite.grounding.resolve_sources)
SPAN = "x-sglite-span"          # on a string: a verbatim span of the text
WRITTEN = "x-sglite-number"     # on a number or integer: one of the numbers the text writes, as written
GROUNDING = {SPAN: "string", WRITTEN: "number"}


def check_supported(schema: dict, ptr: str) -> None:
    """Raises UnsupportedSchemaError for the first keyword of `schema` that cannot be enforced exactly."""
    for k in schema:
        if k in UNSUPPORTED:
            raise UnsupportedSchemaError(k, ptr)
        if k in GROUNDING:
            types = type_kinds(type_list(schema.get("type", [])))
            if types != {GROUNDING[k]}:
                raise UnsupportedSchemaError(k, ptr, f"only on a schema of type {GROUNDING[k]}"
                                             f"{' or integer' if k == WRITTEN else ''} alone")
            source_text(schema, k, ptr)


def source_text(schema: dict, keyword: str, ptr: str) -> str | None:
    """The source text of grounding `keyword` in `schema` (None: not there). Raises GrammarError naming the
    field when it is not resolved ({"text": non-empty str}, plus `written_options`' keys for WRITTEN)."""
    if keyword not in schema:
        return None
    v = schema[keyword]
    if isinstance(v, str) or (isinstance(v, dict) and "source" in v):
        name = v if isinstance(v, str) else v["source"]
        raise GrammarError(f"{keyword} at {ptr} names the source {name!r}, which was not given: pass its text "
                           f"(gen(..., sources={{{name!r}: text}}))")
    allowed = {"text"} | ({"scales", "negate"} if keyword == WRITTEN else set())
    if not (isinstance(v, dict) and "text" in v and set(v) <= allowed and isinstance(v["text"], str)):
        raise GrammarError(f"{keyword} at {ptr} must be a source name or {{\"text\": str}}"
                           f"{' with optional scales, negate' if keyword == WRITTEN else ''}, got {v!r:.80}")
    if not v["text"].strip():
        raise GrammarError(f"{keyword} at {ptr}: the source text is empty")
    return v["text"]


def written_options(schema: dict, ptr: str) -> tuple[tuple, bool]:
    """(scales, negate) of a resolved WRITTEN keyword: the factors a written number may be read with (a
    unit: 1000 for "billion" where the field is in millions; default (1,)) and whether its negation may be
    read too (a loss written without its sign)."""
    v = schema[WRITTEN]
    scales = v.get("scales", [1])
    if not (isinstance(scales, list) and scales and
            all(isinstance(k, (int, float)) and not isinstance(k, bool) and k > 0 for k in scales)):
        raise GrammarError(f"{WRITTEN} at {ptr}: scales must be a non-empty list of positive numbers, got "
                           f"{scales!r:.80}")
    if not isinstance(v.get("negate", False), bool):
        raise GrammarError(f"{WRITTEN} at {ptr}: negate must be true or false")
    return tuple(scales), v.get("negate", False)


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
