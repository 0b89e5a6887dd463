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
TERM = "x-sglite-term"          # resolved before compiling (sglite.grounding: an enum); here only refused
GROUNDING = {SPAN: "string", WRITTEN: "number"}
# WRITTEN's options: read in any of `scales` and, with `negate`, negated (the model picks); or read in place, by the
# unit word after the number (`units`: word -> factor) and the words of its clause (`negative_words`)
_CHOSEN = ("scales", "negate")
_READ = ("units", "negative_words", "unit_required")
WRITTEN_OPTIONS = _CHOSEN + _READ


def check_supported(schema: dict, ptr: str) -> None:
    """Raises UnsupportedSchemaError for the first keyword of `schema` that cannot be enforced exactly."""
    for k in schema:
        if k in UNSUPPORTED:
            raise UnsupportedSchemaError(k, ptr)
        if k == TERM:
            raise UnsupportedSchemaError(k, ptr, "a term field becomes an enum when the program resolves its "
                                         "source (gen(..., sources=...), a server's sources field)")
        if k in GROUNDING:
            types = type_kinds(type_list(schema.get("type", [])))
            if types != {GROUNDING[k]}:
                raise UnsupportedSchemaError(k, ptr, f"only on a schema of type {GROUNDING[k]}"
                                             f"{' or integer' if k == WRITTEN else ''} alone")
            source_text(schema, k, ptr)


def source_text(schema: dict, keyword: str, ptr: str) -> str | None:
    """The source text of grounding `keyword` in `schema` (None: not there). Raises GrammarError naming the
    field when it is not resolved ({"text": non-empty str}, plus WRITTEN_OPTIONS for WRITTEN)."""
    if keyword not in schema:
        return None
    v = schema[keyword]
    if isinstance(v, str) or (isinstance(v, dict) and "source" in v):
        name = v if isinstance(v, str) else v["source"]
        raise GrammarError(f"{keyword} at {ptr} names the source {name!r}, which was not given: pass its text "
                           f"(gen(..., sources={{{name!r}: text}}))")
    allowed = {"text"} | (set(WRITTEN_OPTIONS) if keyword == WRITTEN else set())
    if not (isinstance(v, dict) and "text" in v and set(v) <= allowed and isinstance(v["text"], str)):
        raise GrammarError(f"{keyword} at {ptr} must be a source name or {{\"text\": str}}"
                           f"{' with optional ' + ', '.join(WRITTEN_OPTIONS) if keyword == WRITTEN else ''}, "
                           f"got {v!r:.80}")
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
            all(_positive(k) for k in scales)):
        raise GrammarError(f"{WRITTEN} at {ptr}: scales must be a non-empty list of positive numbers, got "
                           f"{scales!r:.80}")
    if not isinstance(v.get("negate", False), bool):
        raise GrammarError(f"{WRITTEN} at {ptr}: negate must be true or false")
    return tuple(scales), v.get("negate", False)


def reading_options(schema: dict, ptr: str) -> tuple[dict, tuple, bool] | None:
    """(units, negative_words, unit_required) of a resolved WRITTEN keyword that reads its numbers in place
    (None: it has none of them). Raises GrammarError naming the option that is malformed or mixed with
    scales/negate."""
    v = schema[WRITTEN]
    if not set(_READ) & set(v):
        return None
    mixed = [k for k in _CHOSEN if k in v]
    if mixed:
        raise GrammarError(f"{WRITTEN} at {ptr}: {mixed[0]} (the model picks the reading) cannot be combined "
                           "with units/negative_words/unit_required (the text's words pick it)")
    units = v.get("units", {})
    if not (isinstance(units, dict) and all(isinstance(w, str) and w.strip() and _positive(k)
                                            for w, k in units.items())):
        raise GrammarError(f"{WRITTEN} at {ptr}: units must map unit words to positive factors, got "
                           f"{units!r:.80}")
    words = v.get("negative_words", [])
    if not (isinstance(words, list) and all(isinstance(w, str) and w.strip() for w in words)):
        raise GrammarError(f"{WRITTEN} at {ptr}: negative_words must be a list of words, got {words!r:.80}")
    required = v.get("unit_required", False)
    if not isinstance(required, bool) or (required and not units):
        raise GrammarError(f"{WRITTEN} at {ptr}: unit_required must be true or false, and true only with units")
    return units, tuple(words), required


def _positive(k: Any) -> bool:
    return isinstance(k, (int, float)) and not isinstance(k, bool) and k > 0


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
