"""RadixCache units on small int sequences; check_integrity after every operation."""
from __future__ import annotations

import random

import pytest
import torch

from sglite.runtime.engine.radix_cache import RadixCache


def slots(*xs):
    return torch.tensor(xs, dtype=torch.int64)


def test_insert_and_match_exact_and_partial():
    c = RadixCache()
    assert c.insert([1, 2, 3, 4], slots(10, 11, 12, 13)) == 0
    c.check_integrity()
    m = c.match_prefix([1, 2, 3, 4, 5])
    assert m.slots.tolist() == [10, 11, 12, 13]
    assert c.match_prefix([9]).slots.numel() == 0
    assert c.evictable_size == 4 and c.protected_size == 0


def test_match_mid_edge_splits_node():
    c = RadixCache()
    c.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    m = c.match_prefix([1, 2, 7])
    c.check_integrity()
    assert m.slots.tolist() == [10, 11]
    assert m.node.key == (1, 2) and len(m.node.children) == 1
    assert c.match_prefix([1, 2, 3, 4]).slots.tolist() == [10, 11, 12, 13]
    c.check_integrity()


def test_insert_returns_already_cached_length():
    c = RadixCache()
    c.insert([1, 2, 3], slots(10, 11, 12))
    assert c.insert([1, 2, 3, 4, 5], slots(20, 21, 22, 23, 24)) == 3
    c.check_integrity()
    # the tree keeps its own slots for the shared part and takes the new ones for the rest
    assert c.match_prefix([1, 2, 3, 4, 5]).slots.tolist() == [10, 11, 12, 23, 24]
    assert c.insert([1, 2, 9], slots(30, 31, 32)) == 2  # diverges mid-edge: split, then a new leaf
    c.check_integrity()
    assert c.total_size == 6


def test_lock_protects_from_eviction_and_unlock_restores():
    c = RadixCache()
    c.insert([1, 2, 3], slots(1, 2, 3))
    c.insert([1, 2, 4], slots(5, 6, 7))  # caller keeps duplicates 5, 6; the tree takes 7
    c.check_integrity()
    m = c.match_prefix([1, 2, 3])
    c.lock(m.node)
    c.check_integrity()
    assert c.protected_size == 3 and c.evictable_size == 1
    freed = c.evict(100)
    c.check_integrity()
    assert freed.tolist() == [7]  # only the unlocked leaf [4]
    assert c.match_prefix([1, 2, 3]).slots.tolist() == [1, 2, 3]
    c.unlock(m.node)
    c.check_integrity()
    assert c.evictable_size == 3
    assert sorted(c.evict(100).tolist()) == [1, 2, 3]
    assert c.total_size == 0
    c.check_integrity()


def test_unlock_without_lock_raises():
    c = RadixCache()
    c.insert([1], slots(1))
    with pytest.raises(RuntimeError):
        c.unlock(c.match_prefix([1]).node)


def test_evict_least_recently_used_first():
    c = RadixCache()
    c.insert([1, 1], slots(1, 2))
    c.insert([2, 2], slots(3, 4))
    c.insert([3, 3], slots(5, 6))
    c.match_prefix([1, 1])  # touch: now [2, 2] is the oldest
    assert c.evict(1).tolist() == [3, 4]
    c.check_integrity()
    assert c.evict(1).tolist() == [5, 6]
    c.check_integrity()


def test_evict_walks_up_to_parents():
    c = RadixCache()
    c.insert([1, 2, 3], slots(1, 2, 3))
    c.insert([1, 2, 4], slots(1, 2, 4))  # the 1, 2 are duplicates the caller keeps; tree takes slot 4 only
    assert c.total_size == 4
    assert sorted(c.evict(4).tolist()) == [1, 2, 3, 4]
    assert c.total_size == 0
    c.check_integrity()


def test_integrity_detects_corruption():
    c = RadixCache()
    c.insert([1, 2], slots(1, 2))
    c._evictable += 1
    with pytest.raises(AssertionError):
        c.check_integrity()


def test_random_operations_match_reference():
    """Fuzz: whatever is inserted and not evicted is matched with the slots it was first inserted with."""
    rng = random.Random(0)
    c = RadixCache()
    ref: dict[tuple, int] = {}  # token prefix -> slot of its last token
    next_slot = 1
    locks = []
    for _ in range(300):
        op = rng.random()
        seq = [rng.randint(0, 3) for _ in range(rng.randint(1, 8))]
        if op < 0.5:
            new = slots(*range(next_slot, next_slot + len(seq)))
            next_slot += len(seq)
            had = c.insert(seq, new)
            for i in range(had, len(seq)):
                ref[tuple(seq[:i + 1])] = int(new[i])
        elif op < 0.7:
            m = c.match_prefix(seq)
            c.lock(m.node)
            locks.append(m.node)
        elif op < 0.85 and locks:
            c.unlock(locks.pop(rng.randrange(len(locks))))
        else:
            for s in c.evict(rng.randint(1, 5)).tolist():
                for k in [k for k, v in ref.items() if v == s]:
                    del ref[k]
        c.check_integrity()
        m = c.match_prefix(seq)
        expect = []
        for i in range(len(seq)):
            if tuple(seq[:i + 1]) not in ref:
                break
            expect.append(ref[tuple(seq[:i + 1])])
        assert m.slots.tolist() == expect
    assert c.total_size == len(ref)


def test_cached_len_is_read_only_and_agrees_with_match_prefix():
    """The scheduler's lookup for every waiting request: the same length match_prefix finds, with the tree
    (edges and LRU stamps) untouched."""
    rng = random.Random(3)
    c = RadixCache()
    for i in range(30):
        seq = [rng.randrange(4) for _ in range(rng.randrange(1, 9))]
        c.insert(seq, torch.arange(len(seq)) + 100 * i + 1)

    def shape(node):
        return (node.key, node.last_access, tuple(shape(ch) for _, ch in sorted(node.children.items())))

    for _ in range(200):
        q = [rng.randrange(4) for _ in range(rng.randrange(0, 10))]
        before = shape(c.root)
        n = c.cached_len(q)
        assert shape(c.root) == before
        assert n == c.match_prefix(q).slots.numel()
        c.check_integrity()
