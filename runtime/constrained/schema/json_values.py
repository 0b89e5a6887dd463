"""JSON value semantics that schema keywords compare by: equality (enum/const/oneOf) and the six kinds."""
from __future__ import annotations

from typing import Any, Hashable, Iterable

KINDS = ("null", "boolean", "number", "string", "array", "object")


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, True != 1, object key order ignored. Symmetric."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def json_key(v: Any) -> Hashable:
    """A hashable key with json_key(a) == json_key(b) exactly when json_equal(a, b): for sets of values
    (deduplicating an enum of n values was n^2 / 2 comparisons)."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("#", v)          # 1 == 1.0 and hash(1) == hash(1.0), as for json_equal
    if isinstance(v, list):
        return ("a", tuple(json_key(x) for x in v))
    if isinstance(v, dict):
        return ("o", frozenset((k, json_key(x)) for k, x in v.items()))
    return (type(v).__name__, v)


def json_in(v: Any, values: Iterable) -> bool:
    """Whether `v` is one of `values` under JSON equality."""
    return any(json_equal(v, x) for x in values)


def json_kind(v: Any) -> str:
    """One of KINDS (integers are numbers)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"
