"""Checking one JSON value against a schema that may hold the internal keywords of negation.py, exactly:
the internal keywords are checked here, the rest by `jsonschema` (the enum/const filters use it)."""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from ..errors import GrammarError
from .document import SchemaDocument
from .json_values import json_in, json_kind

INTERNAL = ("$exclude", "$patterns", "$notPattern", "$notMultipleOf", "$absent")


def valid(doc: SchemaDocument, s: Any, value: Any, ptr: str) -> bool:
    """Whether `value` satisfies `s` (a sub-schema of `doc`)."""
    import jsonschema
    if s is True or s == {}:
        return True
    if s is False:
        return False
    if not _internal_ok(s, value):
        return False
    std = _standard(s)
    if isinstance(std, dict):
        root = doc.root
        if isinstance(root, dict):
            for k in ("$defs", "definitions"):
                if k in root and k not in std:
                    std = {**std, k: root[k]}
    try:
        cls = jsonschema.validators.validator_for(std, default=jsonschema.Draft202012Validator) \
            if isinstance(std, dict) else jsonschema.Draft202012Validator
        return cls(std).is_valid(value)
    except jsonschema.exceptions.SchemaError as e:
        raise GrammarError(f"invalid schema at {ptr}: {e.message}") from None


def _internal_ok(s: Any, v: Any) -> bool:
    """The top-level internal keywords and multipleOf (exact decimal arithmetic) of `s` on `v`."""
    if not isinstance(s, dict):
        return True
    kind = json_kind(v)
    if json_in(v, s.get("$exclude", [])):
        return False
    if kind == "string":
        if not all(re.search(p, v) for p in s.get("$patterns", [])):
            return False
        if any(re.search(p, v) for p in s.get("$notPattern", [])):
            return False
    if kind == "number":
        x = Fraction(repr(v)) if isinstance(v, float) else Fraction(v)

        def multiple(step) -> bool:
            f = Fraction(repr(step)) if isinstance(step, float) else Fraction(step)
            return (x / f).denominator == 1
        if "multipleOf" in s and not multiple(s["multipleOf"]):
            return False
        if any(multiple(step) for step in s.get("$notMultipleOf", [])):
            return False
    if kind == "object" and any(n in v for n in s.get("$absent", [])):
        return False
    return True


def _standard(s: Any) -> Any:
    """`s` in standard keywords: top-level internal keywords and multipleOf dropped (checked exactly by
    `_internal_ok`), nested ones rewritten (`$notPattern: [p]` -> `not: {pattern: p}`, ...)."""
    if not isinstance(s, dict):
        return s
    return {k: _nested(v) for k, v in s.items() if k not in INTERNAL and k != "multipleOf"}


def _nested(x: Any) -> Any:
    if isinstance(x, list):
        return [_nested(v) for v in x]
    if not isinstance(x, dict):
        return x
    out, extra = {}, []
    for k, v in x.items():
        if k in ("enum", "const"):
            out[k] = v
        elif k == "$exclude":
            extra.append({"not": {"enum": list(v)}})
        elif k == "$patterns":
            extra.extend({"pattern": p} for p in v)
        elif k == "$notPattern":
            extra.extend({"not": {"pattern": p}} for p in v)
        elif k == "$notMultipleOf":
            extra.extend({"not": {"multipleOf": float(m)}} for m in v)
        elif k == "$absent":
            extra.extend({"not": {"required": [n]}} for n in v)
        elif k == "multipleOf":
            out[k] = float(v) if not isinstance(v, (int, float)) else v
        else:
            out[k] = _nested(v)
    if extra:
        out["allOf"] = list(out.get("allOf", [])) + extra
    return out
