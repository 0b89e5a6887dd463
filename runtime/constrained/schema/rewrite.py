"""Keywords enforced by rewriting them into ones the lowerings already enforce exactly (allOf, anyOf and the
complements from negation.py):

    not S                       -> the complement of S
    if I then T else E          -> anyOf[allOf[I, T], allOf[not I, E]]  (then only: anyOf[not I, T];
                                   else only: anyOf[I, E])
    dependentSchemas {a: S}     -> anyOf[{a absent}, S]             (draft-7 `dependencies` with a schema too)
    oneOf [A0, A1, ...]         -> anyOf[allOf[Ai, not Aj for each j that may overlap Ai]]
    unevaluatedProperties/Items -> closed by the names / positions evaluated in place (unevaluated.py)

A rewrite that needs a complement negation.py cannot write is UnsupportedSchemaError naming the keyword."""
from __future__ import annotations

from typing import Any

from ..errors import UnsupportedSchemaError
from .disjoint import disjoint
from .document import SchemaDocument
from .negation import negate
from .unevaluated import resolve_unevaluated

TRIGGERS = ("not", "if", "dependentSchemas", "dependencies", "oneOf", "unevaluatedProperties", "unevaluatedItems")


def needs_rewrite(s: Any) -> bool:
    return isinstance(s, dict) and any(k in s for k in TRIGGERS)


def rewrite(doc: SchemaDocument, s: dict, ptr: str) -> Any:
    """`s` without not / if-then-else / dependentSchemas / schema dependencies / overlapping oneOf /
    unevaluated*: the same schema as a conjunction (allOf) of `s`'s other keywords and the rewrites."""
    s = {k: v for k, v in s.items() if doc.knows(k)}
    if "unevaluatedProperties" in s or "unevaluatedItems" in s:
        s = resolve_unevaluated(doc, s, ptr)
        if not needs_rewrite(s):
            return s
    rest = {k: v for k, v in s.items() if k not in ("not", "if", "then", "else", "dependentSchemas")}
    extra: list = []
    if "not" in s:
        extra.append(negate(doc, s["not"], f"{ptr}/not"))
    if "if" in s and ("then" in s or "else" in s):
        extra.append(_if_then_else(doc, s["if"], s.get("then"), s.get("else"), ptr))
    deps = dict(s.get("dependentSchemas") or {})
    if isinstance(s.get("dependencies"), dict):
        legacy = {k: v for k, v in s["dependencies"].items() if not isinstance(v, list)}
        if legacy:
            rest["dependencies"] = {k: v for k, v in s["dependencies"].items() if isinstance(v, list)}
            deps.update(legacy)
    for name, sub in deps.items():
        if sub is not True and sub != {}:
            extra.append({"anyOf": [{"$absent": [name]}, sub]})
    if "oneOf" in s:
        siblings = {k: v for k, v in s.items() if k != "oneOf"}
        alts = _exclusive(doc, s["oneOf"], siblings, ptr)
        if alts is not None:
            rest.pop("oneOf")
            extra.append({"anyOf": alts})
    if not extra:
        return rest
    return {"allOf": ([rest] if rest else []) + extra}


def _if_then_else(doc: SchemaDocument, cond: Any, then: Any, other: Any, ptr: str) -> Any:
    if cond is True or cond == {}:
        return True if then is None else then
    if cond is False:
        return True if other is None else other
    if other is None:
        return {"anyOf": [_complement(doc, cond, ptr, "if"), then]}
    if then is None:
        return {"anyOf": [cond, other]}
    return {"anyOf": [{"allOf": [cond, then]}, {"allOf": [_complement(doc, cond, ptr, "if"), other]}]}


def _exclusive(doc: SchemaDocument, alts: list, siblings: dict, ptr: str) -> list | None:
    """oneOf's alternatives made pairwise exclusive (None: they already are, beside `siblings`)."""
    if not isinstance(alts, list) or not alts:
        return None     # the compiler reports the malformed oneOf
    within = [{"allOf": [siblings, a]} if siblings else a for a in alts]
    overlaps = {(i, j) for i in range(len(alts)) for j in range(len(alts))
                if i != j and not disjoint(doc, within[i], within[j], ptr)}
    if not overlaps:
        return None
    out = []
    for i, a in enumerate(alts):
        others = [_complement(doc, alts[j], f"{ptr}/oneOf/{j}", "oneOf", i, j)
                  for j in range(len(alts)) if (i, j) in overlaps]
        out.append({"allOf": [a] + others})
    return out


def _complement(doc: SchemaDocument, s: Any, ptr: str, keyword: str, i: int = -1, j: int = -1) -> Any:
    try:
        return negate(doc, s, ptr)
    except UnsupportedSchemaError as e:
        why = f"alternatives {i} and {j} may both match, and" if keyword == "oneOf" else "it needs"
        raise UnsupportedSchemaError(keyword, ptr.rsplit("/oneOf/", 1)[0] if keyword == "oneOf" else ptr,
                                     f"{why} the complement of {e.pointer}, which is not supported "
                                     f"({_detail(e)})") from None


def _detail(e: UnsupportedSchemaError) -> str:
    msg = str(e)
    msg = msg.split(": ", 1)[1] if ": " in msg else msg
    return msg.replace(" (remove it or rewrite the schema without it)", "")
