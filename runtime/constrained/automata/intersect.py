"""Intersection of two character automata (pattern and format, number bounds, multipleOf and range)."""
from __future__ import annotations

from ..errors import GrammarError
from .charfsm import CharFSM


def intersect(a: CharFSM, b: CharFSM, limit: int = 20_000) -> CharFSM:
    """Product automaton accepting the words of both; only pairs reachable on a common character become
    states, and more than `limit` of them is a GrammarError."""
    index = {(a.initial, b.initial): 0}
    order = [(a.initial, b.initial)]
    trans = []
    i = 0
    while i < len(order):
        x, y = order[i]
        out = []
        ra, rb = a.trans[x], b.trans[y]      # sorted, disjoint ranges: one merge walk finds every overlap
        p = q = 0
        while p < len(ra) and q < len(rb):
            lo = max(ra[p][0], rb[q][0])
            hi = min(ra[p][1], rb[q][1])
            if lo <= hi:
                key = (ra[p][2], rb[q][2])
                if key not in index:
                    index[key] = len(order)
                    order.append(key)
                    if len(order) > limit:
                        raise GrammarError("pattern intersection too large")
                out.append((lo, hi, index[key]))
            if ra[p][1] < rb[q][1]:
                p += 1
            else:
                q += 1
        trans.append(tuple(out))
        i += 1
    finals = {k: True for (x, y), k in index.items() if x in a.finals and y in b.finals}
    return CharFSM(0, tuple(trans), finals)
