"""The one cache type of the grammar stack: `LruCache`s charged to one `CacheBudget`.

Every compiled artefact that outlives a call (grammars, lexeme DFAs, the token index's classifications and
packed masks, each grammar's mask caches, the name DFAs that objects share) sits in an LruCache, and every
LruCache of one compiler is charged to that compiler's budget (`grammar_cache_bytes`): one byte count, one
least-recently-used order across them all. A cache may also bound itself (`limit` bytes, `max_entries`), within
the budget.

Recency is a stamp per entry and per cache, written on every hit without a lock (a dict lookup and two stores:
the hot mask lookups cost about what a plain dict did). Eviction, under the budget's lock, gathers the entries'
stamps and sizes into numpy arrays and sorts them there, which gives the stamp at or before which entries must
go for the bytes to be back to `TRIM_TO` of the bound; a cache last used before that stamp (a grammar no longer
used: all its mask caches) is emptied without a look at its entries, the others lose the entries older than it.
Sorting Python tuples of every entry of every cache (tens of thousands of masks) put 50-100 ms on the compile
that crossed the bound; this is paid once per tenth of the budget filled. A dropped entry is only recomputed by
the next lookup that needs it: whoever holds a value keeps it. A cache's bytes leave the budget when the cache is
collected (a grammar evicted and no longer used)."""
from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections.abc import Hashable
from typing import Any, Callable

import numpy as np

ENTRY_OVERHEAD = 100   # an entry's slots in the three dicts and its stamp, roughly
TRIM_TO = 0.9          # eviction stops at this share of the bound


def value_bytes(value: Any) -> int:
    """What a cached value holds, cheaply: numpy arrays by their buffers, objects with an `nbytes()` method by
    it, tuples and lists one level deep, anything else by sys.getsizeof."""
    if isinstance(value, np.ndarray):
        return value.nbytes + 112
    nbytes = getattr(value, "nbytes", None)
    if callable(nbytes):
        return int(nbytes())
    if isinstance(value, (tuple, list)):
        return sys.getsizeof(value) + sum(
            v.nbytes + 112 if isinstance(v, np.ndarray) else sys.getsizeof(v) for v in value)
    return sys.getsizeof(value)


class CacheBudget:
    """One byte bound over every LruCache made with it. `limit` may be changed; the next insert or `trim()`
    applies it. Thread-safe."""

    def __init__(self, limit: int):
        if not (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0):
            raise ValueError(f"cache_bytes must be an int > 0, got {limit!r}")
        self.limit = limit
        self._bytes = 0
        self._caches: weakref.WeakSet[LruCache] = weakref.WeakSet()
        self._lock = threading.RLock()      # re-entered when a collected cache's finalizer runs inside it
        self.stamp = itertools.count(1).__next__   # recency: atomic under the GIL

    def nbytes(self) -> int:
        return self._bytes

    def _add(self, n: int) -> None:
        with self._lock:
            self._bytes += n

    def trim(self) -> None:
        """Evicts least recently used entries, across every cache, until the bytes are within the bound."""
        with self._lock:
            if self._bytes <= self.limit:
                return
            caches = [c for c in self._caches if c._values]
            stamps = np.concatenate([np.fromiter(c._stamps.values(), np.int64, len(c._stamps)) for c in caches])
            sizes = np.concatenate([np.fromiter(c._sizes.values(), np.int64, len(c._sizes)) for c in caches])
            order = np.argsort(stamps, kind="stable")
            need = self._bytes - int(self.limit * TRIM_TO)
            k = min(int(np.searchsorted(np.cumsum(sizes[order]), need)), len(order) - 1)
            cutoff = int(stamps[order[k]])        # entries stamped at or before it go
            for c in caches:
                if c.last <= cutoff:
                    c._drop_all()
                else:
                    for key in [key for key, t in c._stamps.items() if t <= cutoff]:
                        c._drop(key)


class LruCache:
    """A dict of computed values charged to `budget` (each value's bytes: `size(value)`, default value_bytes),
    least recently used out first when the budget is full; also bounded by `limit` bytes and `max_entries` of
    its own where given. `get(key, default=None)` returns `default` for a missing key, as a dict does. Values,
    sizes and stamps sit in three dicts of the same keys: an entry makes no object of its own (no list per entry
    for the garbage collector to track)."""

    def __init__(self, budget: CacheBudget, name: str, limit: int | None = None, max_entries: int | None = None,
                 size: Callable[[Any], int] = value_bytes):
        self.budget, self.name, self.limit, self.max_entries, self._size = budget, name, limit, max_entries, size
        self._values: dict[Hashable, Any] = {}
        self._sizes: dict[Hashable, int] = {}
        self._stamps: dict[Hashable, int] = {}
        self._held = [0]                              # this cache's bytes (shared with its finalizer)
        self.last = budget.stamp()                    # its latest hit or insert
        self.get = _getter(self._values, self._stamps, budget.stamp, self)   # the hot path, as a closure
        budget._caches.add(self)
        weakref.finalize(self, _release, budget, self._held)

    def put(self, key: Hashable, value: Any, nbytes: int | None = None) -> Any:
        """Stores `value` unless `key` is stored already (first writer wins: the stored value is returned, so
        every caller shares one), and trims."""
        return self._store(key, value, nbytes, replace=False)

    def __setitem__(self, key: Hashable, value: Any) -> None:
        """Stores `value` under `key`, replacing what was there, and trims."""
        self._store(key, value, None, replace=True)

    def _store(self, key: Hashable, value: Any, nbytes: int | None, replace: bool) -> Any:
        n = (self._size(value) if nbytes is None else nbytes) + ENTRY_OVERHEAD
        b = self.budget
        with b._lock:
            self.last = b.stamp()
            if key in self._values:
                if not replace:
                    self._stamps[key] = self.last
                    return self._values[key]
                self._drop(key)
            if n > b.limit or (self.limit is not None and n > self.limit):
                return value       # larger than the bound by itself: not kept, and nothing evicted for it
            self._values[key] = value
            self._sizes[key] = n
            self._stamps[key] = self.last
            self._held[0] += n
            b._bytes += n
            if (self.limit is not None and self._held[0] > self.limit) or \
                    (self.max_entries is not None and len(self._values) > self.max_entries):
                self._trim_own()
            if b._bytes > b.limit:
                b.trim()
        return value

    def _drop_all(self) -> None:
        """Every entry (the budget's lock held)."""
        self.budget._bytes -= self._held[0]
        self._held[0] = 0
        self._values.clear()
        self._sizes.clear()
        self._stamps.clear()

    def _trim_own(self) -> None:
        """Its own bounds (the budget's lock held): oldest out first."""
        goal_bytes = None if self.limit is None else int(self.limit * TRIM_TO)
        goal_count = None if self.max_entries is None else self.max_entries
        for _, key in sorted((t, k) for k, t in self._stamps.items()):
            if (goal_bytes is None or self._held[0] <= goal_bytes) and \
                    (goal_count is None or len(self._values) <= goal_count):
                break
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        if self._values.pop(key, _MISSING) is not _MISSING:
            n = self._sizes.pop(key)
            del self._stamps[key]
            self._held[0] -= n
            self.budget._bytes -= n

    def clear(self) -> None:
        with self.budget._lock:
            self._drop_all()

    def nbytes(self) -> int:
        return self._held[0]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list:
        return list(self._values)

    def values(self) -> list:
        return list(self._values.values())

    def __repr__(self) -> str:
        return f"LruCache({self.name!r}, {len(self._values)} entries, {self._held[0]} bytes)"


_MISSING = object()


def _getter(values: dict, stamps: dict, stamp: Callable[[], int], cache: LruCache) -> Callable[..., Any]:
    """`cache.get(key, default=None)`: the value stored under `key` (stamped as just used), else `default`."""
    def get(key: Hashable, default: Any = None) -> Any:
        v = values.get(key, _MISSING)
        if v is _MISSING:
            return default
        stamps[key] = cache.last = stamp()
        return v
    return get


def _release(budget: CacheBudget, held: list) -> None:
    """A collected cache's bytes leave its budget."""
    budget._add(-held[0])
    held[0] = 0
