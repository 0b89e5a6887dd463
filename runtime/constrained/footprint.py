"""What a compiled grammar holds in memory, for the grammar cache's byte bound (compiler.py).

`Footprint(grammar, shared)` measures the grammar's tables once (every object it reaches, numpy arrays by their
buffers, the token index and its shared caches left out, and every LruCache, which charges its own entries to
the budget: cache.py) and keeps a handle on its mask caches, which grow as requests use the grammar: `nbytes()`
is the tables plus the caches as they are now. The compiler charges a grammar's entry with its `tables`."""
from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from typing import Any

import numpy as np

from .automata.byte_dfa import ByteDFA
from .cache import ENTRY_OVERHEAD, LruCache

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           types.CodeType)


def deep_bytes(root: Any, skip: set[int]) -> int:
    """Bytes of every object reachable from `root`, each counted once, not entering objects whose id is in
    `skip` (shared ones), classes, modules or functions."""
    seen = set(skip)
    todo = [root]
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE) or isinstance(obj, LruCache):  # caches: charged apart
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            total += sys.getsizeof(obj) + (obj.nbytes if obj.base is None else 0)
            if obj.base is not None:
                todo.append(obj.base)
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, (str, bytes, bytearray, int, float, bool, complex, type(None))):
            continue
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        else:
            d = getattr(obj, "__dict__", None)
            if isinstance(d, dict):
                todo.append(d)
            for cls in type(obj).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if isinstance(slot, str) and hasattr(obj, slot):
                        todo.append(getattr(obj, slot))
    return total


def cache_bytes(owner: Any, lru: bool = True) -> int:
    """The growing caches of a mask object: its LruCaches by what they hold (cache.py; `lru` False: left out),
    its dict attributes as entries times one entry's size."""
    total = 0
    for value in vars(owner).values():
        if isinstance(value, LruCache):
            total += value.nbytes() if lru else 0
        elif isinstance(value, dict) and value:
            sample = next(iter(value.values()))
            one = sample.nbytes if isinstance(sample, np.ndarray) else sys.getsizeof(sample)
            total += len(value) * (one + ENTRY_OVERHEAD)
    return total


class Footprint:
    """One cached grammar's bytes: its tables (measured once) plus its mask caches as they grow."""

    def __init__(self, grammar: Any, shared: Iterable[Any]):
        skip = set()
        for obj in shared:
            skip.add(id(obj))
            for value in (vars(obj).values() if hasattr(obj, "__dict__") else ()):
                skip.add(id(value))
                if isinstance(value, dict):
                    skip.update(id(v) for v in value.values())
        self._growing = _mask_owners(grammar)
        # deep_bytes does not enter LruCaches: only dict caches are to take out
        self.tables = deep_bytes(grammar, skip) - sum(cache_bytes(m, lru=False) for m in self._growing)

    def nbytes(self) -> int:
        return max(self.tables, 0) + sum(cache_bytes(m) for m in self._growing)


def _mask_owners(grammar: Any) -> list[Any]:
    """The objects holding a grammar's growing mask caches: its `masks`, and its bodies' (a structural tag's)."""
    owners = [grammar.masks] if hasattr(grammar, "masks") else [grammar]
    for body in getattr(grammar, "bodies", ()):
        owners.extend(_mask_owners(body))
    return owners


def dfa_bytes(value: Any) -> int:
    """A shared lexeme DFA by its `nbytes()`, anything else by `deep_bytes`."""
    return value.nbytes() if isinstance(value, ByteDFA) else deep_bytes(value, set())
