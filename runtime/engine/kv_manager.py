"""KVManager: who owns each KV slot (free list, prefix cache, or a running request) and each table row.

Every slot in 1..num_slots-1 is in exactly one place: the allocator's free list, the prefix cache, or
req_to_token[kv.row, kv.shared_len:kv.len] of one running request (see request.py). `check_integrity` verifies this.

The cache keys a request's tokens by the LoRA adapter it runs under (`cache_key`): K/V computed under one adapter
(or the base) is never served to a request under another. An adapter's tokens are shifted into a range of their
own, `token + uid * NAMESPACE_STRIDE` (uid > 0 is never reused in the process, so an adapter loaded again under the
same name does not meet its predecessor's K/V); the base's keys are the token ids themselves.
"""
from __future__ import annotations

import torch

from ..kv_pool import ReqToTokenPool, SlotAllocator
from .radix_cache import PrefixCache, RadixCache
from .request import Req, ReqStatus

NAMESPACE_STRIDE = 1 << 32   # above every vocabulary's ids


def cache_key(req: Req, start: int, end: int) -> list[int]:
    """req's tokens [start, end) as prefix-cache keys (see the top of this file)."""
    tokens = req.tokens(start, end)
    if not req.lora_uid:
        return tokens
    shift = req.lora_uid * NAMESPACE_STRIDE
    return [t + shift for t in tokens]


class KVManager:
    def __init__(self, num_slots: int, max_requests: int, max_context: int, device: str | torch.device,
                 disable_radix_cache: bool = False):
        self.num_slots = num_slots
        self.allocator = SlotAllocator(num_slots)  # slot ids live on the CPU; the table goes to `device`
        self.req_to_token = ReqToTokenPool(max_requests, max_context, device)
        self.cache: PrefixCache | None = None if disable_radix_cache else RadixCache()
        self.running: set[Req] = set()

    @property
    def available(self) -> int:
        """Slots obtainable now: free plus evictable from the cache."""
        return self.allocator.available + (self.cache.evictable_size if self.cache else 0)

    def match_len(self, req: Req) -> int:
        """How many leading tokens the cache would serve `req`. Read-only (PrefixCache.cached_len)."""
        if self.cache is None:
            return 0
        return self.cache.cached_len(cache_key(req, 0, req.max_cacheable_prefix()))

    def admit(self, req: Req) -> bool:
        """Takes a table row for req, matches and locks the cached prefix. False if no row is free. (req is
        RUNNING while it holds the row.)"""
        row = self.req_to_token.alloc()
        if row is None:
            return False
        req.kv.row = row
        req.kv.len = req.kv.shared_len = 0
        if self.cache is not None:
            slots, node = self.cache.match_prefix(cache_key(req, 0, req.max_cacheable_prefix()))
            self.cache.lock(node)
            req.kv.node = node
            req.kv.len = req.kv.shared_len = len(slots)
            self.req_to_token.table[row, :len(slots)] = slots.to(self.req_to_token.table)
        self.running.add(req)
        return True

    def alloc(self, n: int) -> torch.Tensor | None:
        """n slots, evicting from the cache if needed; None (nothing changes) if not obtainable."""
        if n > self.available:
            return None
        short = n - self.allocator.available
        if short > 0:
            self.allocator.free(self.cache.evict(short))
        return self.allocator.alloc(n)

    def cache_unfinished(self, req: Req) -> None:
        """Moves req's computed K/V into the cache so other requests can share it; req keeps using it (locked).
        Slots another request inserted meanwhile win: req's duplicates are freed and its row repointed."""
        if self.cache is None or req.kv.len <= req.kv.shared_len:
            return
        tokens = cache_key(req, 0, req.kv.len)
        row = self.req_to_token.table[req.kv.row]
        slots = row[:req.kv.len].to(torch.int64).cpu()  # slot ids live on the CPU
        already = self.cache.insert(tokens, slots)
        self.allocator.free(slots[req.kv.shared_len:already])
        new_slots, node = self.cache.match_prefix(tokens)
        row[:req.kv.len] = new_slots.to(row)
        self.cache.lock(node)
        self.cache.unlock(req.kv.node)
        req.kv.node, req.kv.shared_len = node, req.kv.len

    def advance(self, req: Req, computed: int, rejected: int = 0) -> None:
        """After a forward pass: the K/V of req's next `computed` tokens is valid (kv.len grows by it; the one
        place it grows), and the `rejected` slots written just past them (draft tokens not accepted) are freed.
        The row keeps stale ids there, which nothing reads (only [:kv.len] is valid)."""
        req.kv.len += computed
        if rejected:
            row = self.req_to_token.table[req.kv.row]
            self.allocator.free(row[req.kv.len:req.kv.len + rejected].to(torch.int64).cpu())

    def release(self, req: Req) -> None:
        """RUNNING -> not running (finish, abort or retraction): computed K/V goes to the cache (or the free
        list when the cache is off); the row is freed. Afterwards req holds nothing and kv.len == 0."""
        row = self.req_to_token.table[req.kv.row]
        slots = row[:req.kv.len].to(torch.int64).cpu()  # slot ids live on the CPU
        if self.cache is None:
            self.allocator.free(slots)
        else:
            already = self.cache.insert(cache_key(req, 0, req.kv.len), slots)
            self.allocator.free(slots[req.kv.shared_len:already])
            self.cache.unlock(req.kv.node)
        self.req_to_token.free(req.kv.row)
        self.running.discard(req)
        req.kv.row, req.kv.node, req.kv.len, req.kv.shared_len = None, None, 0, 0

    def reset(self) -> None:
        """Forgets every request and cached prefix: all slots and rows become free."""
        for req in self.running:
            req.kv.row, req.kv.node, req.kv.len, req.kv.shared_len = None, None, 0, 0
        self.running.clear()
        if self.cache is not None:
            self.cache = RadixCache()
        self.allocator.clear()
        rows = self.req_to_token.table.shape[0]
        self.req_to_token._free_rows = list(range(rows - 1, -1, -1))

    def flush(self) -> bool:
        """Empties the cache; only when no request is running."""
        if self.running:
            return False
        if self.cache is not None:
            self.cache.reset()
        self.allocator.clear()
        return True

    def check_integrity(self) -> None:
        owned = [self.allocator._free]
        if self.cache is not None:
            self.cache.check_integrity()
            owned.append(self.cache.all_slots())
        table = self.req_to_token.table
        for req in self.running:
            assert req.status is ReqStatus.RUNNING, f"{req} is tracked as running"
            owned.append(table[req.kv.row, req.kv.shared_len:req.kv.len].to(torch.int64).cpu())
            if self.cache is not None:
                cached = self.cache.match_prefix(cache_key(req, 0, req.kv.shared_len)).slots
                assert len(cached) == req.kv.shared_len, f"{req}: cached prefix missing from the tree"
                assert torch.equal(cached, table[req.kv.row, :req.kv.shared_len].to(torch.int64).cpu()), \
                    f"{req}: row does not point at the tree's slots"
        slots = torch.cat(owned)
        assert slots.numel() == self.num_slots - 1, f"{slots.numel()} slots accounted, expected {self.num_slots - 1}"
        assert torch.equal(slots.sort().values, torch.arange(1, self.num_slots)), "a slot is lost or owned twice"
