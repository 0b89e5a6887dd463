"""The token index is a library object: building one leaves process-wide state (the garbage collector) alone,
and its ~100k-node trie adds nothing for the collector to traverse."""
from __future__ import annotations

import gc

from sglite.runtime.constrained.vocab.token_index import TokenIndex


def test_building_an_index_leaves_the_garbage_collector_alone(tokenizer):
    gc.collect()
    frozen, enabled, before = gc.get_freeze_count(), gc.isenabled(), len(gc.get_objects())
    index = TokenIndex(tokenizer)
    gc.collect()
    assert gc.get_freeze_count() == frozen and gc.isenabled() == enabled
    assert index.num_nodes > 50_000
    # tuples and dicts of ints are untracked once collected; a list per trie node would add 100k objects
    assert len(gc.get_objects()) - before < 1_000
