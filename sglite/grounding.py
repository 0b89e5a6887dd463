"""Grounded fields: a JSON Schema names the source text a value must come from, and the program gives the text.

    company: str = Field(json_schema_extra={"x-sglite-span": "report"})      # a verbatim span of the report
    eps: float = Field(json_schema_extra={"x-sglite-number": "report"})     # a number the report writes
    revenue: float = Field(json_schema_extra={"x-sglite-number": {"source": "report", "scales": [1, 1000]}})
                                                  # as written, or a written one read in thousands (billions)
    period: str = Field(json_schema_extra={"x-sglite-term": {"source": "report", "kind": "period"}})
                                                  # one of the periods the report names (`Q3 2024`), as enum
    sgl.gen("record", json_schema=FinancialReport, sources={"report": text})

`resolve_sources` replaces each name by {"text": <the source>} before the schema leaves the program, so the
compiled grammar (cached per schema text) is cached per document, and a server or the engine needs nothing
but the schema. The runtime builds the constraint (runtime/constrained/automata/grounding.py). A term field
is resolved here instead, into a plain `enum` of the terms the source names (document_terms.py), so any
server enforces it; where the source names none, `"fallback": "free"` leaves the field to its other keywords,
and without it that is an error naming the field."""
from __future__ import annotations

import json
from typing import Any, Mapping

from .protocol import RequestError

TERM = "x-sglite-term"          # on a string: one of the terms of a kind the source names (resolved to enum)
GROUNDING_KEYWORDS = ("x-sglite-span", "x-sglite-number", TERM)
TERM_KINDS = ("period", "currency")


_DROP = object()     # what a `_rewrite` visitor returns to remove the keyword


class _Into(dict):
    """What a `_rewrite` visitor returns to replace the keyword by these keywords of the same schema object."""


def uses_sources(schema: Any) -> bool:
    """Whether `schema` (a dict or JSON text) has a grounding keyword naming a source."""
    if isinstance(schema, str):
        if not any(k in schema for k in GROUNDING_KEYWORDS):
            return False
        schema = json.loads(schema)
    names: list[str] = []
    _rewrite(schema, "#", lambda node, k, v, name, ptr: names.append(name) if name is not None else None)
    return bool(names)


def with_sources(schema: Any, sources: Any) -> Any:
    """A server's `sources` field applied to a request's json_schema (JSON text or a dict): the schema with its
    source names resolved. Raises RequestError("sources") when there is no schema to apply them to."""
    if schema is None:
        raise RequestError("sources", "invalid_value", "sources names texts for json_schema's grounded fields; "
                           "this request has no json_schema")
    from .protocol import load_json_schema
    return resolve_sources(load_json_schema(schema), sources)


def resolve_sources(schema: Any, sources: Mapping[str, str]) -> Any:
    """`schema` (a dict, as loaded) with every grounding keyword's source name replaced by {"text": ...}.
    Raises RequestError("sources") naming the keyword's JSON pointer for a name `sources` lacks or an empty
    text, and for a `sources` that is not a mapping of names to str."""
    if not isinstance(sources, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in sources.items()):
        raise RequestError("sources", "invalid_type", f"sources must map names to texts, got {sources!r:.80}")
    used: set[str] = set()

    def resolve(node: dict, k: str, v: Any, name: str | None, ptr: str) -> Any:
        if name is None:
            return v                    # resolved already
        if name not in sources:
            raise RequestError("sources", "invalid_value", f"{k} at {ptr} names the source {name!r}, which "
                               f"sources does not give (it gives {sorted(sources)})")
        if not sources[name].strip():
            raise RequestError("sources", "invalid_value", f"{k} at {ptr}: source {name!r} is empty")
        used.add(name)
        if k == TERM:
            return _term_enum(node, v, sources[name], ptr)
        return {"text": sources[name], **({x: y for x, y in v.items() if x != "source"} if isinstance(v, dict)
                                          else {})}

    out = _rewrite(schema, "#", resolve)
    if not used:
        raise RequestError("sources", "invalid_value", "sources given, but the schema has no x-sglite-span, "
                           "x-sglite-number or x-sglite-term field naming one of them")
    return out


def without_sources(schema: Any, allowed: set[str]) -> Any:
    """`schema` with its grounding keywords removed, for checking the rest before any source text exists (a
    job's preflight). Raises RequestError("sources") naming the pointer of one that names a source outside
    `allowed` or sits on a schema of the wrong type."""
    def drop(node: dict, k: str, v: Any, name: str | None, ptr: str) -> Any:
        if name is not None and name not in allowed:
            raise RequestError("sources", "invalid_value", f"{k} at {ptr} names the source {name!r}; this job "
                               f"gives {sorted(allowed)}")
        if k == TERM:
            _term_options(v, ptr)
        want = ("number", "integer") if k == "x-sglite-number" else ("string",)
        if node.get("type") not in want:
            raise RequestError("sources", "invalid_value", f"{k} at {ptr} is only for a schema of type "
                               f"{' or '.join(want)}")
        return _DROP

    return _rewrite(schema, "#", drop)


def _rewrite(node: Any, ptr: str, visit) -> Any:
    """`node` (a loaded schema, or part of one at JSON pointer `ptr`) with each grounding keyword's value
    replaced by `visit(schema object, keyword, value, source name or None, ptr)` (`_DROP`: the keyword
    removed); everything else copied as it is."""
    if isinstance(node, list):
        return [_rewrite(x, f"{ptr}/{i}", visit) for i, x in enumerate(node)]
    if not isinstance(node, dict):
        return node
    out, into = {}, {}
    for k, v in node.items():
        if k in GROUNDING_KEYWORDS:
            name = v if isinstance(v, str) else v.get("source") if isinstance(v, dict) else None
            v = visit(node, k, v, name, ptr)
            if isinstance(v, _Into):
                into.update(v)
            elif v is not _DROP:
                out[k] = v
        else:
            out[k] = _rewrite(v, f"{ptr}/{k.replace('~', '~0').replace('/', '~1')}", visit)
    out.update(into)
    return out


def _term_options(v: Any, ptr: str) -> tuple[str, bool]:
    """(kind, free fallback) of an `x-sglite-term` value; RequestError("sources") naming `ptr` if malformed."""
    if not (isinstance(v, dict) and set(v) <= {"source", "kind", "fallback"} and v.get("kind") in TERM_KINDS
            and v.get("fallback", "error") in ("error", "free")):
        raise RequestError("sources", "invalid_value", f"{TERM} at {ptr} must be {{\"source\": name, \"kind\": "
                           f"{' or '.join(map(repr, TERM_KINDS))}, optional \"fallback\": \"free\"}}, got {v!r:.80}")
    return v["kind"], v.get("fallback") == "free"


def _term_enum(node: dict, v: Any, text: str, ptr: str) -> "_Into":
    """The keywords an `x-sglite-term` becomes: `enum` of the terms `text` names that the node's own `enum`
    (if any) allows; none left: nothing (fallback free) or RequestError naming `ptr`."""
    from .document_terms import document_currencies, document_periods
    kind, free = _term_options(v, ptr)
    terms = (document_periods if kind == "period" else document_currencies)(text)
    if "enum" in node:
        terms = [t for t in terms if t in node["enum"]]
    if terms:
        return _Into(enum=terms)
    if free:
        return _Into()
    raise RequestError("sources", "invalid_value", f"{TERM} at {ptr}: the source names no {kind} (add "
                       f"\"fallback\": \"free\" to generate the field then)")
