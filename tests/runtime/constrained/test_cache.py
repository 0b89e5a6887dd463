"""The one cache type (cache.py): LruCaches charged to one CacheBudget, least recently used out first across
all of them; and every cache of a compiler is charged to its `grammar_cache_bytes`."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from sglite.runtime.constrained import GrammarCompiler
from sglite.runtime.constrained.cache import ENTRY_OVERHEAD, CacheBudget, LruCache


def block(n: int = 1000) -> np.ndarray:
    return np.zeros(n, np.uint8)      # n + 112 bytes (value_bytes) + ENTRY_OVERHEAD per entry


def test_one_bound_and_one_order_across_caches():
    budget = CacheBudget(20_000)
    a, b = LruCache(budget, "a"), LruCache(budget, "b")
    for i in range(5):
        a.put(i, block())
    for i in range(50):
        b.put(i, block())
        a.get(0)                      # kept in use: never the oldest
        assert budget.nbytes() <= budget.limit
    assert 0 in a and 1 not in a      # a's unused entries went first, before b's newer ones
    assert 49 in b and 0 not in b
    assert budget.nbytes() == a.nbytes() + b.nbytes()


def test_a_cache_bounds_itself_within_the_budget():
    budget = CacheBudget(10**9)
    counted = LruCache(budget, "counted", max_entries=8)
    sized = LruCache(budget, "sized", limit=10 * (1000 + 112 + ENTRY_OVERHEAD))
    for i in range(100):
        counted.put(i, block())
        sized.put(i, block())
    assert len(counted) <= 8 and 99 in counted
    assert sized.nbytes() <= sized.limit and 99 in sized


def test_a_value_past_the_bound_by_itself_is_not_kept_and_evicts_nothing():
    budget = CacheBudget(20_000)
    a, own = LruCache(budget, "a"), LruCache(budget, "own", limit=5_000)
    for i in range(5):
        a.put(i, block())
    held = budget.nbytes()
    huge = block(30_000)
    assert a.put("huge", huge) is huge and "huge" not in a
    assert own.put("big", block(6_000)) is not None and "big" not in own
    assert all(i in a for i in range(5)) and budget.nbytes() == held


def test_first_writer_wins_and_item_assignment_replaces():
    cache = LruCache(CacheBudget(10**6), "c")
    first, second = block(), block()
    assert cache.put("k", first) is first and cache.put("k", second) is first
    cache["k"] = second
    assert cache.get("k") is second and cache.get("missing") is None and cache.get("missing", 7) == 7
    cache["f"] = False                # falsy values are values
    assert cache.get("f") is False


def test_a_collected_cache_gives_its_bytes_back():
    budget = CacheBudget(10**6)
    kept, gone = LruCache(budget, "kept"), LruCache(budget, "gone")
    kept.put(0, block())
    gone.put(0, block())
    del gone
    gc.collect()
    assert budget.nbytes() == kept.nbytes() > 0


def test_the_bound_is_checked():
    with pytest.raises(ValueError, match="cache_bytes"):
        CacheBudget(0)


def test_every_cache_of_a_compiler_is_under_its_one_budget(tokenizer):
    """Grammars, shared DFAs, token-index classifications and packed masks, each grammar's stack masks, the
    closing searches: all charged to one budget, which a flood of distinct grammars used by requests keeps
    within `cache_bytes`."""
    limit = 24 * 2**20
    compiler = GrammarCompiler(tokenizer, cache_bytes=limit)
    names = set()
    for i in range(40):
        g = compiler.compile_json_schema({"type": "object", "properties": {f"f{i}": {"type": "string",
                                                                              "pattern": f"^[a-{chr(98 + i % 20)}]+$"}},
                                          "required": [f"f{i}"]}, whitespace="compact", property_order="schema")
        m = g.matcher()
        for ch in '{"f%d":"ab' % i:
            m.allowed_mask()
            m.closing_words(8)
            assert m.accept_string(ch)
        assert compiler.cached_bytes() <= limit
        names |= {c.name for c in compiler.caches._caches}
    assert {"grammars", "lexeme DFAs", "token classes", "stack masks", "closings"} <= names
    live = sum(c.nbytes() for c in compiler.caches._caches)
    assert live == compiler.cached_bytes()
