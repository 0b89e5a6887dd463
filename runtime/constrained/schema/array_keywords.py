"""`contains`/`minContains`/`maxContains` and `uniqueItems`, rewritten into keywords an ArrayNode enforces.

contains: with a trivial count (contains true or false, minContains 0, maxContains 0: every item fails it)
it is a length bound or an items schema; in a short array of bounded length it is an anyOf over which positions
match. Otherwise (`counted_array`) the ArrayNode counts the items that match: each position gets a node for an
item that matches (items AND contains) and one for an item that does not (items AND NOT contains; just items
when there is no maxContains, as an uncounted match can only make the count fall short), and the parser checks
the count. uniqueItems: when every item has finitely
many possible values (enum, const, boolean, null), the arrays of distinct items are listed (an enum of arrays,
each checked against the whole schema); otherwise refused."""
from __future__ import annotations

from itertools import combinations
from typing import Any, Optional

from ..errors import GrammarError, UnsupportedSchemaError
from ..ir.nodes import ArrayNode
from .disjoint import values
from .json_values import json_in
from .keywords import tuple_items, type_list
from .lowerer import Lowerer
from .negation import negate

MAX_CONTAINS_ALTERNATIVES = 32    # position choices for contains in a bounded array
MAX_UNIQUE_ARRAYS = 64            # arrays of distinct items listed for uniqueItems


def _count(s: dict, k: str, default: Optional[int], ptr: str) -> Optional[int]:
    v = s.get(k, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
        raise GrammarError(f"{k} at {ptr} must be a non-negative integer")
    return int(v)


def contains_rewrite(sc: Lowerer, s: dict, ptr: str) -> Any:
    """`s` (an array schema with `contains`) without contains/minContains/maxContains, or None where the matches
    must be counted (`counted_array`)."""
    c = s["contains"]
    lo, hi = _count(s, "minContains", 1, ptr), _count(s, "maxContains", None, ptr)
    rest = {k: v for k, v in s.items() if k not in ("contains", "minContains", "maxContains")}
    if hi is not None and hi < lo:
        return False
    if lo == 0 and hi is None:
        return rest
    c, _ = sc.doc.deref(c, f"{ptr}/contains")
    if c is True or c == {}:           # every item matches: a length bound
        return {"allOf": [rest, {"minItems": lo, **({"maxItems": hi} if hi is not None else {})}]}
    try:
        nc = negate(sc.doc, c, f"{ptr}/contains")
    except UnsupportedSchemaError as e:
        nc = e
    if nc is True:                     # no item matches
        return rest if lo == 0 else False
    if hi == 0 and not isinstance(nc, Exception):
        return {"allOf": [rest, {"items": nc}]}
    prefix, tail = tuple_items(rest)
    length = rest.get("maxItems")
    if tail is False:
        length = len(prefix) if length is None else min(length, len(prefix))
    if length is None:
        return None
    alts = []
    min_len = _count(rest, "minItems", 0, ptr)
    if hi is None:
        # some `lo` positions match; the others may or may not
        for chosen in combinations(range(int(length)), lo):
            last = chosen[-1] + 1 if chosen else 0
            alts.append({"minItems": max(last, min_len), "prefixItems": [c if i in chosen else True
                                                                         for i in range(last)]})
            if len(alts) > MAX_CONTAINS_ALTERNATIVES:
                break
    else:
        if isinstance(nc, Exception):
            raise UnsupportedSchemaError("contains", ptr, f"maxContains needs the complement of contains: "
                                         f"{nc}") from None
        for n in range(min_len, int(length) + 1):
            for k in range(lo, min(hi, n) + 1):
                for chosen in combinations(range(n), k):
                    alts.append({"minItems": n, "maxItems": n,
                                 "prefixItems": [c if i in chosen else nc for i in range(n)]})
            if len(alts) > MAX_CONTAINS_ALTERNATIVES:
                break
    if len(alts) > MAX_CONTAINS_ALTERNATIVES:
        return None
    if not alts:
        return False
    return {"allOf": [rest, {"anyOf": alts}]}


def counted_array(sc: Lowerer, s: dict, ptr: str) -> int:
    """The ArrayNode of `s` (an array schema with `contains` that contains_rewrite left to counting)."""
    lo, hi = _count(s, "minContains", 1, ptr), _count(s, "maxContains", None, ptr)
    rest = {k: v for k, v in s.items() if k not in ("contains", "minContains", "maxContains")}
    c, _ = sc.doc.deref(s["contains"], f"{ptr}/contains")
    if hi is None:
        nc: Any = None
    else:
        try:
            nc = negate(sc.doc, c, f"{ptr}/contains")
        except UnsupportedSchemaError as e:
            raise UnsupportedSchemaError("contains", ptr, f"maxContains needs the complement of contains: "
                                         f"{e}") from None
    prefix, tail = tuple_items(rest)
    places = [(p, f"{ptr}/prefixItems/{i}") for i, p in enumerate(prefix)] + [(tail, f"{ptr}/items")]

    def node(item: Any, extra: Any, where: str) -> Optional[int]:
        if item is False:
            return None
        return sc.compile(item if extra is None else {"allOf": [item, extra]}, where)
    pre = tuple(sc.compile(p, w) for p, w in places[:-1])
    return sc.add(ArrayNode(pre, node(tail, None, f"{ptr}/items"), _count(rest, "minItems", 0, ptr),
                            _count(rest, "maxItems", None, ptr),
                            hits=tuple(node(p, c, w) for p, w in places),
                            misses=tuple(node(p, nc, w) for p, w in places), min_contains=lo, max_contains=hi))


def unique_arrays(sc: Lowerer, s: dict, ptr: str) -> Any:
    """`s` (an array schema with uniqueItems: true) as an enum of the arrays of distinct items it allows."""
    rest = {k: v for k, v in s.items() if k != "uniqueItems"}
    prefix, tail = tuple_items(rest)
    max_len = _count(rest, "maxItems", None, ptr)
    min_len = _count(rest, "minItems", 0, ptr)
    pre_vals = [_finite(sc, p, f"{ptr}/prefixItems/{i}") for i, p in enumerate(prefix)]
    tail_vals = [] if tail is False else _finite(sc, tail, f"{ptr}/items")
    if any(v is None for v in pre_vals) or tail_vals is None:
        raise UnsupportedSchemaError("uniqueItems", ptr, "only arrays whose items have finitely many values "
                                     "(enum, const, boolean, null) are supported")
    limit = len(prefix) + len(tail_vals)
    max_len = limit if max_len is None else min(max_len, limit)
    out: list = []

    def extend(arr: list) -> None:
        if len(arr) >= min_len:
            out.append(list(arr))
            if len(out) > MAX_UNIQUE_ARRAYS:
                raise UnsupportedSchemaError("uniqueItems", ptr, f"more than {MAX_UNIQUE_ARRAYS} arrays of "
                                             "distinct items to list")
        if len(arr) == max_len:
            return
        vals = pre_vals[len(arr)] if len(arr) < len(prefix) else tail_vals
        for v in vals:
            if not json_in(v, arr):
                arr.append(v)
                extend(arr)
                arr.pop()
    extend([])
    return {**rest, "type": "array", "enum": out}


def _finite(sc: Lowerer, s: Any, ptr: str) -> Optional[list]:
    """The values `s` allows if they are few and listed (enum, const, boolean, null); None otherwise."""
    if s is False:
        return []
    s, ptr = sc.doc.deref(s, ptr)
    if not isinstance(s, dict):
        return None
    listed = values(sc.doc, s)          # const / enum
    if listed is not None:
        return listed
    if "type" in s and set(type_list(s["type"])) <= {"boolean", "null"}:
        return [v for t in type_list(s["type"]) for v in ((True, False) if t == "boolean" else (None,))]
    if "anyOf" in s and isinstance(s["anyOf"], list):
        parts = [_finite(sc, a, f"{ptr}/anyOf/{i}") for i, a in enumerate(s["anyOf"])]
        if all(p is not None for p in parts):
            return [v for p in parts for v in p]
    return None
