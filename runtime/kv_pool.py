"""The paged KV pool: K/V storage for token slots, a slot allocator, and the request -> slot table.

Layout (shared with the Triton kernels in sglite.kernels):
    k_buffer, v_buffer: [num_layers, num_slots, num_kv_heads, head_dim]
    k_scale, v_scale:   [num_layers, num_slots, num_kv_heads] bfloat16, quantized pools only
    req_to_token:       [max_requests, max_context] int32; row r, column p = pool slot of request r's token p
Slot 0 is never handed out: padding writes land there, so it may hold garbage.

Cache formats (`kv_cache_dtype`): "auto" stores K/V in the model's activation dtype; "bf16" in bfloat16; "int8"
as int8 with a bfloat16 scale per slot and KV head (about absmax / 127; values rounded to nearest); "fp8_e4m3" as
float8 e4m3 with a bfloat16 scale per slot and KV head (about absmax / 448): 2 bytes a head, so a head of 64 values
takes 66 bytes against bf16's 128. Quantized pools store each head's K and V vectors
rotated by `rotation(D)` (an orthonormal, symmetric Hadamard matrix): a key's few large channels spread over all
its values, so the one scale per head costs the small channels far less (SmolLM2, teacher-forced over 2,048
tokens: int8 top-1 agreement with a float32 cache 98.5% unrotated, 99.2% rotated). Attention is unchanged by the
rotation (qR . kR = q . k; sum p vR = (sum p v) R): the CPU kernel takes qR and rotates its output back, and
`gather` returns the vectors rotated back. A value reads back as stored * scale, computed in float32, by every
path alike (`gather`, the CPU decode kernel, the Triton backend's dequantized layer). A slot's scale is set by
the K/V written to it: quantization depends on that token alone, never on what else the batch holds.
"""
from __future__ import annotations

import torch

from sglite.kernels import kv_quant_cpu, registry

KV_CACHE_DTYPES = ("auto", "bf16", "int8", "fp8_e4m3")
_STORAGE = {"bf16": torch.bfloat16, "int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}
_QMAX = {"int8": 127.0, "fp8_e4m3": 448.0}


class KVPool:
    """K and V tensors of every layer. Owns memory only; who uses which slot is the allocator's business.

    `dtype` is what store() takes and gather() returns (the model's activations); the buffers hold
    `kv_cache_dtype`'s storage. `direct`: the buffers hold `dtype` itself, so kernels may write them in place."""

    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 kv_cache_dtype: str = "auto"):
        if num_slots < 2:
            raise ValueError(f"KV pool needs at least 2 slots (slot 0 is reserved), got {num_slots}")
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
        shape = (num_layers, num_slots, num_kv_heads, head_dim)
        storage = _STORAGE.get(kv_cache_dtype, dtype)
        self.dtype = dtype
        self.kv_cache_dtype = kv_cache_dtype
        self.qmax = _QMAX.get(kv_cache_dtype)          # None: not quantized
        self.k_buffer = torch.zeros(shape, dtype=storage, device=device)
        self.v_buffer = torch.zeros(shape, dtype=storage, device=device)
        self.k_scale = self.v_scale = None
        if self.quantized:
            self.k_scale = torch.ones(shape[:3], dtype=torch.bfloat16, device=device)
            self.v_scale = torch.ones(shape[:3], dtype=torch.bfloat16, device=device)
        self.direct = storage == dtype
        self.num_slots = num_slots
        # quantized pools store keys rotated by an orthonormal R (q . k = qR . kR): a few large channels of a
        # key spread over all of its head's values, so one scale per head loses far less of the small ones
        self.key_rotation = rotation(head_dim, device) if self.quantized else None
        # quantized stores on the CPU go through one numba kernel where it runs (chosen here, once)
        self._quant_kernel = self.quantized and self.k_buffer.device.type == "cpu" and registry.use("kv_quant_cpu")
        self._kernel_views = None      # numpy views for the CPU quantize-store kernel (made on first store)

    @property
    def quantized(self) -> bool:
        return self.qmax is not None

    @staticmethod
    def token_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                    kv_cache_dtype: str = "auto") -> int:
        """K and V of one token in every layer, scales included, for a pool of these settings."""
        storage = _STORAGE.get(kv_cache_dtype, dtype)
        scale = 2 if kv_cache_dtype in _QMAX else 0        # a bfloat16 scale per head
        return 2 * num_layers * num_kv_heads * (head_dim * storage.itemsize + scale)

    @property
    def bytes_per_slot(self) -> int:
        L, _, H, D = self.k_buffer.shape
        return self.token_bytes(L, H, D, self.dtype, self.kv_cache_dtype)

    @property
    def nbytes(self) -> int:
        return self.bytes_per_slot * self.num_slots

    def store(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Writes k, v [n, H, D] (any float dtype) at `slots` [n] of `layer`."""
        if not self.quantized:
            self.k_buffer[layer].index_copy_(0, slots, k.to(self.k_buffer.dtype))
            self.v_buffer[layer].index_copy_(0, slots, v.to(self.v_buffer.dtype))
            return
        if self._quant_kernel:
            if self._kernel_views is None:
                self._kernel_views = (_raw(self.k_buffer).view(torch.uint8).numpy(),
                                      _raw(self.v_buffer).view(torch.uint8).numpy(),
                                      self.k_scale.view(torch.int16).numpy(), self.v_scale.view(torch.int16).numpy(),
                                      self.key_rotation.contiguous().numpy())
            kb, vb, ks, vs, rot = self._kernel_views
            kv_quant_cpu.quantize_store(k.float().contiguous().numpy(), v.float().contiguous().numpy(), rot,
                                        slots.numpy(), kb[layer], vb[layer], ks[layer], vs[layer], self.qmax)
            return
        # [2, n, H, D]: K and V in one pass of ops
        q, s = kv_quant_cpu.quantize_ref(torch.stack([k, v]), self.key_rotation, self.qmax, self.k_buffer.dtype)
        _raw(self.k_buffer[layer]).index_copy_(0, slots, _raw(q[0]))
        _raw(self.v_buffer[layer]).index_copy_(0, slots, _raw(q[1]))
        self.k_scale[layer].index_copy_(0, slots, s[0])
        self.v_scale[layer].index_copy_(0, slots, s[1])

    def _read(self, buf: torch.Tensor, scale: torch.Tensor | None, layer: int,
              slots: torch.Tensor | None, rotated: bool = False) -> torch.Tensor:
        x = buf[layer] if slots is None else _raw(buf[layer]).index_select(0, slots).view(buf.dtype)
        if scale is None:
            return x if x.dtype == self.dtype else x.to(self.dtype)
        s = scale[layer] if slots is None else scale[layer].index_select(0, slots)
        x = x.float() * s.float()[..., None]
        return (self.rotate(x) if rotated else x).to(self.dtype)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Queries or keys [..., D] float32 in the stored keys' basis (x itself when keys are stored unrotated)."""
        return x if self.key_rotation is None else x @ self.key_rotation

    def gather(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V [n, H, D] in `dtype` of `slots` [n] of `layer`: only those rows are read (and dequantized;
        keys rotated back, R being orthonormal and symmetric)."""
        return (self._read(self.k_buffer, self.k_scale, layer, slots, rotated=True),
                self._read(self.v_buffer, self.v_scale, layer, slots, rotated=True))

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole layer's K and V [S, H, D] in `dtype`: the buffers themselves when `direct`, else a converted
        copy of this one layer (the Triton backend's path for other storage)."""
        return self.gather(layer, None) if not self.direct else (self.k_buffer[layer], self.v_buffer[layer])

    def zero_slot(self, layer: int, slot: int = 0) -> None:
        """Slot `slot` of `layer` reads back as zeros (padding columns gather slot 0)."""
        _raw(self.k_buffer)[layer, slot] = 0
        _raw(self.v_buffer)[layer, slot] = 0


def rotation(d: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """[d, d] float32, orthonormal and symmetric (its own inverse): the Sylvester Hadamard matrix / sqrt(d) when d
    is a power of two, else the Householder reflection I - 2uu^T of a fixed unit vector u with every entry equal in
    size (the same matrix in every process)."""
    if d & (d - 1) == 0:
        h = torch.ones(1, 1)
        while h.shape[0] < d:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        return (h / d ** 0.5).to(device)
    signs = torch.tensor([1.0 if (i * 7 + 3) % 5 < 3 else -1.0 for i in range(d)])
    u = signs / d ** 0.5
    return (torch.eye(d) - 2 * torch.outer(u, u)).to(device)


def _raw(x: torch.Tensor) -> torch.Tensor:
    """float8 tensors as their bytes (torch's CPU index ops do not take float8), others as they are."""
    return x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x


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
