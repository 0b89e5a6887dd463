"""The prefix cache (RadixAttention): a radix tree over token ids whose nodes own KV pool slots.

Page size is one token: a slot holds one token's K/V, so any shared prefix is reused to the exact token (no
partial-page waste or copy-on-write), and the torch/Triton backends address the pool per token anyway.

Ownership: a slot is owned by exactly one of the allocator's free list, the tree, or a running request. A
request locks the path it matched (`lock`); locked nodes are never evicted. `evictable_size` counts slots in
unlocked nodes, `protected_size` slots in locked ones.
"""
from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from typing import NamedTuple, Sequence

import torch


class TreeNode:
    __slots__ = ("key", "value", "children", "parent", "lock_ref", "last_access")

    def __init__(self, key: tuple[int, ...] = (), value: torch.Tensor | None = None, parent: "TreeNode | None" = None):
        self.key = key                                   # token ids on the edge from parent to this node
        self.value = value if value is not None else torch.empty(0, dtype=torch.int64)  # [len(key)] slots
        self.children: dict[int, TreeNode] = {}          # first token of the child's key -> child
        self.parent = parent
        self.lock_ref = 0                                # running requests whose matched path ends at or below
        self.last_access = 0

    def __repr__(self) -> str:
        return f"TreeNode(len={len(self.key)}, lock_ref={self.lock_ref}, children={len(self.children)})"


class MatchResult(NamedTuple):
    slots: torch.Tensor   # [n] int64: KV slots of the longest cached prefix (n tokens)
    node: TreeNode        # last node of the match; pass to lock/unlock


class PrefixCache(ABC):
    @abstractmethod
    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """Longest cached prefix of `tokens`. May split a node when the match ends mid-edge (same slots, same
        tree contents); refreshes LRU times along the path. Allocates and frees nothing."""

    @abstractmethod
    def cached_len(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the cache holds. Read-only: splits nothing, stamps nothing (the
        scheduler asks it of every waiting request each step)."""

    @abstractmethod
    def insert(self, tokens: Sequence[int], slots: torch.Tensor) -> int:
        """Adds tokens[i] -> slots[i]. Returns how many leading tokens were already cached: the caller still
        owns slots[:returned] (duplicates, to free or keep) and the tree now owns slots[returned:]."""

    @abstractmethod
    def lock(self, node: TreeNode) -> None:
        """Increments lock_ref on node and its ancestors; they can no longer be evicted."""

    @abstractmethod
    def unlock(self, node: TreeNode) -> None:
        """Undoes one `lock(node)`. Must pair with an earlier lock of the same node."""

    @abstractmethod
    def evict(self, num_tokens: int) -> torch.Tensor:
        """Removes least-recently-used unlocked leaves until at least num_tokens slots are freed (or nothing
        evictable is left). Returns the freed slots; the caller gives them to the allocator."""

    @abstractmethod
    def reset(self) -> torch.Tensor:
        """Empties the tree (no node may be locked). Returns every slot it owned."""

    @abstractmethod
    def check_integrity(self) -> None:
        """Raises AssertionError if sizes, keys or reference counts are inconsistent."""

    @property
    @abstractmethod
    def evictable_size(self) -> int: ...

    @property
    @abstractmethod
    def protected_size(self) -> int: ...

    @property
    def total_size(self) -> int:
        return self.evictable_size + self.protected_size


class RadixCache(PrefixCache):
    def __init__(self) -> None:
        self.root = TreeNode()
        self.root.lock_ref = 1  # the root is never evicted
        self._evictable = 0
        self._protected = 0
        self._clock = itertools.count(1)

    # --- lookup and insertion -------------------------------------------------------------------------------
    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        tokens = tuple(tokens)
        now = next(self._clock)
        self.root.last_access = now
        node, pos, parts = self._walk(tokens, now)
        slots = torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)
        return MatchResult(slots, node)

    def cached_len(self, tokens: Sequence[int]) -> int:
        tokens = tuple(tokens)
        node, pos = self.root, 0
        while pos < len(tokens) and tokens[pos] in node.children:
            child = node.children[tokens[pos]]
            n = _common_len(child.key, tokens, pos)
            pos += n
            if n < len(child.key):
                break
            node = child
        return pos

    def insert(self, tokens: Sequence[int], slots: torch.Tensor) -> int:
        tokens = tuple(tokens)
        if len(tokens) != len(slots):
            raise ValueError(f"insert got {len(tokens)} tokens but {len(slots)} slots")
        now = next(self._clock)
        node, pos, _ = self._walk(tokens, now)
        if pos < len(tokens):
            leaf = TreeNode(tokens[pos:], slots[pos:].clone(), node)
            leaf.last_access = now
            node.children[tokens[pos]] = leaf
            self._evictable += len(leaf.key)
        return pos

    def _walk(self, tokens: tuple, now: int) -> tuple[TreeNode, int, list[torch.Tensor]]:
        """Follows tokens down the tree, splitting the last edge where the match ends mid-edge. Mutates: splits
        and stamps every matched node with `now`. Returns (deepest matched node, tokens matched, slot parts)."""
        node, pos, parts = self.root, 0, []
        while pos < len(tokens) and tokens[pos] in node.children:
            child = node.children[tokens[pos]]
            n = _common_len(child.key, tokens, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            parts.append(child.value)
            node, pos = child, pos + n
        return node, pos, parts

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cuts child's edge after n tokens; returns the new upper node (same lock_ref as child)."""
        upper = TreeNode(child.key[:n], child.value[:n], child.parent)
        upper.lock_ref, upper.last_access = child.lock_ref, child.last_access
        child.parent.children[child.key[0]] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[child.key[0]] = child
        return upper

    # --- locking --------------------------------------------------------------------------------------------
    def lock(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self._evictable -= len(node.key)
                self._protected += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError("unlock without a matching lock")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable += len(node.key)
                self._protected -= len(node.key)
            node = node.parent

    # --- eviction -------------------------------------------------------------------------------------------
    def evict(self, num_tokens: int) -> torch.Tensor:
        heap = [(n.last_access, id(n), n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed, count = [], 0
        while heap and count < num_tokens:
            _, _, leaf = heapq.heappop(heap)
            freed.append(leaf.value)
            count += len(leaf.key)
            self._evictable -= len(leaf.key)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return torch.cat(freed) if freed else torch.empty(0, dtype=torch.int64)

    def reset(self) -> torch.Tensor:
        if self._protected:
            raise RuntimeError("cannot reset the prefix cache while requests hold locks on it")
        slots = [n.value for n in self._nodes()]
        self.root = TreeNode()
        self.root.lock_ref = 1
        self._evictable = 0
        return torch.cat(slots) if slots else torch.empty(0, dtype=torch.int64)

    # --- introspection --------------------------------------------------------------------------------------
    @property
    def evictable_size(self) -> int:
        return self._evictable

    @property
    def protected_size(self) -> int:
        return self._protected

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _leaves(self):
        return (n for n in self._nodes() if not n.children)

    def all_slots(self) -> torch.Tensor:
        parts = [n.value for n in self._nodes()]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)

    def check_integrity(self) -> None:
        evictable = protected = 0
        for node in self._nodes():
            assert len(node.key) > 0, "empty edge below the root"
            assert len(node.key) == len(node.value), f"{node}: key/value length mismatch"
            assert node.parent.children.get(node.key[0]) is node, f"{node}: not indexed under its first token"
            assert node.lock_ref >= 0, f"{node}: negative lock_ref"
            assert node.lock_ref >= sum(c.lock_ref for c in node.children.values()), \
                f"{node}: lock_ref below its children's sum"
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        assert evictable == self._evictable, f"evictable_size {self._evictable} != actual {evictable}"
        assert protected == self._protected, f"protected_size {self._protected} != actual {protected}"
        slots = self.all_slots()
        assert slots.numel() == slots.unique().numel(), "a slot is owned by two nodes"
        assert not (slots == 0).any(), "the reserved padding slot 0 is in the tree"


def _common_len(key: tuple[int, ...], tokens: tuple[int, ...], start: int) -> int:
    n = min(len(key), len(tokens) - start)
    if key[:n] == tokens[start:start + n]:  # the common case, compared in C
        return n
    i = 0
    while i < n and key[i] == tokens[start + i]:
        i += 1
    return i
