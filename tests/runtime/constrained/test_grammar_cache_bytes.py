"""The grammar cache is bounded in bytes: each compiled grammar's footprint (its tables, and its mask caches as
requests use it) is counted, and least recently used grammars are evicted past the bound."""
from __future__ import annotations

import gc
import tracemalloc

import pytest

from sglite.runtime.constrained import GrammarCompiler
from sglite.runtime.constrained.footprint import Footprint

LIMIT = 48 * 2**20


def _enum_schema(i: int, n: int = 30) -> dict:
    return {"enum": [f"grammar {i} member {j} of a flood" for j in range(n)]}


@pytest.fixture()
def compiler(tokenizer):
    return GrammarCompiler(tokenizer, cache_bytes=LIMIT)


def test_the_footprint_measures_what_a_grammar_holds(compiler):
    compiler.compile_regex("warm-up")      # the token index's lazy parts, shared, are not the grammar's
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    g = compiler.compile_json_schema(_enum_schema(-1))
    compiler._dfas.clear()                 # held by the grammar alone from here on
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    estimate = Footprint(g, (compiler.index,)).nbytes()
    assert held / 2 < estimate < held * 2, (held, estimate)


def test_a_flood_of_distinct_large_grammars_stays_under_the_bound(compiler):
    sizes = []
    for i in range(20):
        g = compiler.compile_json_schema(_enum_schema(i))
        sizes.append(Footprint(g, (compiler.index,)).nbytes())
        assert compiler.cached_bytes() <= LIMIT
    assert sum(sizes) > 2 * LIMIT          # the flood is well past the bound: eviction did the bounding
    assert len(compiler._cache) < 20
    assert compiler.compile_json_schema(_enum_schema(19)) is g          # the newest stays cached
    assert compiler.compile_json_schema(_enum_schema(0)) is not None    # the oldest was evicted: rebuilt


def test_mask_caches_that_grow_with_use_are_counted(tokenizer):
    compiler = GrammarCompiler(tokenizer)
    g = compiler.compile_regex(r"[a-z]{0,40}")
    start = compiler.cached_bytes()
    m = g.matcher()
    for ch in "abcdefghijklmnopqrstuvwxyz":   # each count a new stack: a new cached mask
        m.allowed_mask()
        assert m.accept_string(ch)
    grown = compiler.cached_bytes()
    assert grown - start >= 20 * g.words * 4
    compiler.cache_bytes = start + (grown - start) // 2   # now past the bound: the next compile call trims
    compiler.compile_regex("x")
    assert g not in compiler._cache.values() and compiler.cached_bytes() <= compiler.cache_bytes


def test_the_bound_is_checked(tokenizer):
    with pytest.raises(ValueError, match="cache_bytes"):
        GrammarCompiler(tokenizer, cache_bytes=0)


def test_evicting_grammars_keeps_the_shared_lexeme_dfas(tokenizer):
    """Past `cache_size` grammars every compile evicts one; the DFAs they share (the plain JSON string) stay,
    so a compile there costs what it costs below the bound (it used to rebuild them every time)."""
    compiler = GrammarCompiler(tokenizer, cache_size=4)
    schema = lambda i: {"type": "object", "properties": {f"name{i}": {"type": "string"}}, "required": [f"name{i}"]}
    compiler.compile_json_schema(schema(0))
    shared = {key: compiler._dfas.get(key) for key in compiler._dfas.keys()}
    assert shared
    for i in range(1, 12):
        compiler.compile_json_schema(schema(i))
    assert len(compiler._cache) == 4
    for key, dfa in shared.items():
        assert compiler._dfas.get(key) is dfa


def test_the_shared_dfas_have_a_byte_bound(tokenizer):
    compiler = GrammarCompiler(tokenizer, cache_bytes=64 * 2**20)   # 8 MiB for the shared DFAs
    for i in range(40):
        compiler.compile_json_schema({"type": "string", "pattern": f"^[a-z]{{{i + 20},{i + 60}}}$"})
        assert compiler._dfas.nbytes() <= compiler._dfas.limit
    assert len(compiler._dfas) < 40
