"""oneOf is enforced as anyOf, which is exact only when no value matches two alternatives: this module proves
that (soundly, not completely) by kinds, by enum/const values, or by a required discriminator property."""
from __future__ import annotations

from typing import Any, Optional

from ..errors import UnsupportedSchemaError
from .document import SchemaDocument
from .json_values import KINDS, json_in, json_kind
from .keywords import type_kinds, type_list


def check_disjoint(doc: SchemaDocument, alts: list, ptr: str) -> None:
    """Raises UnsupportedSchemaError("oneOf") unless every pair of alternatives is provably disjoint."""
    for i in range(len(alts)):
        for j in range(i + 1, len(alts)):
            if not disjoint(doc, alts[i], alts[j], ptr):
                raise UnsupportedSchemaError("oneOf", ptr, f"alternatives {i} and {j} may both match; "
                                             "oneOf is enforced only for provably disjoint alternatives "
                                             "(use anyOf if overlap is fine)")


def disjoint(doc: SchemaDocument, a: Any, b: Any, ptr: str) -> bool:
    """Whether no value can match both schemas (sound, not complete)."""
    common = kinds(doc, a, ptr) & kinds(doc, b, ptr)
    if not common:
        return True
    if _values_apart(values(doc, a), values(doc, b)):
        return True
    a, _ = doc.deref(a, ptr)
    b, _ = doc.deref(b, ptr)
    if common != {"object"} or not isinstance(a, dict) or not isinstance(b, dict):
        return False
    ra, rb = set(a.get("required", [])), set(b.get("required", []))
    pa, pb = a.get("properties", {}), b.get("properties", {})
    # discriminator: a property required by both whose allowed values do not overlap
    for name in ra & rb:
        if _values_apart(values(doc, pa.get(name)), values(doc, pb.get(name))):
            return True
    # one side forbids other names and the other side requires a name outside its properties
    for x, rx_other in ((a, rb), (b, ra)):
        if x.get("additionalProperties", True) is False and "patternProperties" not in x:
            if any(r not in x.get("properties", {}) for r in rx_other):
                return True
    return False


def kinds(doc: SchemaDocument, s: Any, ptr: str, depth: int = 0) -> set[str]:
    """A superset of the value kinds `s` admits (all of KINDS when unsure)."""
    if depth > 16 or s is True:
        return set(KINDS)
    if s is False:
        return set()
    s, ptr = doc.deref(s, ptr)
    if not isinstance(s, dict):
        return set(KINDS)
    out = set(KINDS)
    if "type" in s:
        out &= type_kinds(type_list(s["type"]))
    if "const" in s:
        out &= {json_kind(s["const"])}
    if "enum" in s and isinstance(s["enum"], list):
        out &= {json_kind(v) for v in s["enum"]}
    for kw in ("anyOf", "oneOf"):
        if kw in s:
            u = set()
            for a in s[kw]:
                u |= kinds(doc, a, ptr, depth + 1)
            out &= u
    for a in s.get("allOf", []):
        out &= kinds(doc, a, ptr, depth + 1)
    return out


def values(doc: SchemaDocument, s: Any) -> Optional[list]:
    """The finite value set of an enum/const schema, or None when it is not one."""
    if not isinstance(s, dict):
        return None
    s, _ = doc.deref(s, "#")
    if not isinstance(s, dict):
        return None
    if "const" in s:
        return [s["const"]]
    if "enum" in s:
        return list(s["enum"])
    return None


def _values_apart(va: Optional[list], vb: Optional[list]) -> bool:
    return va is not None and vb is not None and not any(json_in(x, vb) for x in va)
