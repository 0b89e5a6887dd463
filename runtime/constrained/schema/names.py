"""`propertyNames`: the string schema every property name must satisfy, as something an ObjectNode can hold."""
from __future__ import annotations

from typing import Any, Union

from ..automata.charfsm import CharFSM
from ..errors import UnsupportedSchemaError
from .disjoint import kinds
from .keywords import constraints, type_list
from .lowerer import Lowerer
from .merge import merge_all
from .rewrite import needs_rewrite, rewrite
from .standard import valid
from .strings import string_fsm

Names = Union[None, bool, list, CharFSM]


def property_names(sc: Lowerer, names: Any, ptr: str) -> Names:
    """None: any name; False: no name at all; a list: exactly these names; a CharFSM: the names it accepts."""
    if names is True or names == {}:
        return None
    if names is False:
        return False
    s, ptr = sc.doc.deref(names, ptr)
    for _ in range(8):          # rewrites and merges until flat
        if isinstance(s, dict) and needs_rewrite(s):
            s = rewrite(sc.doc, s, ptr)
        elif isinstance(s, dict) and "allOf" in s:
            s = merge_all(sc.doc, s, ptr)
        elif isinstance(s, dict) and set(s) == {"anyOf"}:
            # names are strings: keep the alternatives that admit strings (a complement has one)
            alts = [a for a in s["anyOf"] if "string" in kinds(sc.doc, a, ptr)]
            if len(alts) > 1:
                break
            s = alts[0] if alts else False
        else:
            break
    if s is True or s == {}:
        return None
    if s is False:
        return False
    s = constraints(s)
    if any(k in s for k in ("anyOf", "oneOf", "allOf", "$ref", "not", "if")):
        raise UnsupportedSchemaError("propertyNames", ptr, "only a flat string schema (pattern, length, format, "
                                     "enum/const, not) is supported for names")
    if "type" in s and "string" not in type_list(s["type"]):
        return False
    if "enum" in s or "const" in s:
        vals = list(s["enum"]) if "enum" in s else [s["const"]]
        rest = {k: v for k, v in s.items() if k not in ("enum", "const")}
        return sorted({v for v in vals if isinstance(v, str) and valid(sc.doc, rest, v, ptr)})
    return string_fsm(s, ptr)
