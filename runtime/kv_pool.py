"""The paged KV pool: K/V storage for token slots, a slot allocator, and the request -> slot table.

Layout (shared with the Triton kernels in sglite.kernels):
    k_buffer, v_buffer: [num_layers, num_slots, num_kv_heads, head_dim]
    req_to_token:       [max_requests, max_context] int32; row r, column p = pool slot of request r's token p
Slot 0 is never handed out: padding writes land there, so it may hold garbage.
"""
from __future__ import annotations

import torch


class KVPool:
    """K and V tensors of every layer. Owns memory only; who uses which slot is the allocator's business."""

    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        if num_slots < 2:
            raise ValueError(f"KV pool needs at least 2 slots (slot 0 is reserved), got {num_slots}")
        shape = (num_layers, num_slots, num_kv_heads, head_dim)
        self.k_buffer = torch.zeros(shape, dtype=dtype, device=device)
        self.v_buffer = torch.zeros(shape, dtype=dtype, device=device)
        self.num_slots = num_slots

    @property
    def bytes_per_slot(self) -> int:
        L, _, H, D = self.k_buffer.shape
        return 2 * L * H * D * self.k_buffer.element_size()


class SlotAllocator:
    """Hands out pool slots 1..num_slots-1. alloc/free mutate the free list; slots are int64 tensors."""

    def __init__(self, num_slots: int, device: str | torch.device = "cpu"):
        self.num_slots = num_slots
        self.device = device
        self.clear()

    def clear(self) -> None:
        self._free = torch.arange(1, self.num_slots, dtype=torch.int64, device=self.device)

    @property
    def available(self) -> int:
        return int(self._free.numel())

    def alloc(self, n: int) -> torch.Tensor | None:
        """n free slots, or None (nothing changes) when fewer than n are free."""
        if n > self._free.numel():
            return None
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._free = torch.cat([self._free, slots.to(torch.int64)])


class ReqToTokenPool:
    """Rows of the request -> slot table. A running request holds one row from admission to finish."""

    def __init__(self, max_requests: int, max_context: int, device: str | torch.device = "cpu"):
        self.table = torch.zeros((max_requests, max_context), dtype=torch.int32, device=device)
        self._free_rows = list(range(max_requests - 1, -1, -1))

    @property
    def available(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int) -> None:
        self._free_rows.append(row)
