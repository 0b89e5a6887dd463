"""Quantizing new K/V into a one-byte KV pool on the CPU: one numba call per layer for every row, K and V together,
in place of ~15 small torch ops (each a few µs of dispatch, and on a shared machine a thread hand-off, on a
decode step's handful of rows).

    quantize_store(k, v, rotation, slots, k_buf, v_buf, k_scale, v_scale, qmax)

k, v [T, H, D] float32 (new tokens); rotation [D, D] float32 (orthonormal); slots [T] int64; k_buf, v_buf [S, H, D]
the layer's pool bytes (int8 values, or float8 e4m3 bits as uint8); k_scale, v_scale [S, H] bfloat16 bits (int16).
Per row and head: y = x @ rotation, s = bf16(absmax(y) * (1 + 2^-8) / qmax) (rounded to nearest even; the
factor makes it no less than absmax / qmax), stored = round(y / s) clamped to +-qmax (int8: to nearest even;
float8 e4m3: its nearest-even encoding). `quantize_store_ref` is the torch reference (runtime/kv_pool.py's
format); the kernel sums the rotation in another order, so a value can land one code apart where y / s falls
within rounding of a boundary (the tests bound how often).
"""
from __future__ import annotations

import math

import numpy as np
import torch

try:
    import numba
except ImportError:   # optional: KVPool then stores with the torch reference
    numba = None


def available() -> bool:
    return numba is not None


def quantize_ref(x: torch.Tensor, rotation: torch.Tensor, qmax: float, storage: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (stored [..., D] of `storage`, scale [...] bfloat16): the format's definition."""
    y = x.float() @ rotation
    amax = y.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax * ((1 + 2 ** -8) / qmax), 1.0).to(torch.bfloat16)
    q = torch.div(y, scale.float()).clamp_(-qmax, qmax)
    if storage == torch.int8:
        q = q.round_()
    return q.to(storage), scale[..., 0]


if numba is not None:
    @numba.njit(inline="always")
    def _bf16_bits(f):
        """float32 -> bfloat16 bits, rounded to nearest even (f finite)."""
        u = np.array([f], np.float32).view(np.uint32)[0]
        return np.int16(np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)))

    @numba.njit(inline="always")
    def _bf16_value(b):
        return np.array([np.uint32(np.uint16(b)) << np.uint32(16)], np.uint32).view(np.float32)[0]

    @numba.njit(inline="always")
    def _fp8_e4m3(y):
        """|y| <= 448 -> float8 e4m3fn bits, round to nearest even (subnormals below 2^-6)."""
        sign = np.uint8(0x80) if y < 0 else np.uint8(0)
        a = abs(y)
        if a < np.float32(2.0 ** -6):
            m = int(np.rint(a * np.float32(512.0)))          # multiples of 2^-9; 8 is the smallest normal
            return np.uint8(sign | np.uint8(m))
        mant, e = math.frexp(a)                              # a = mant * 2^e, mant in [0.5, 1) (exact)
        e -= 1
        m = int(np.rint((mant * 2.0 - 1.0) * 8.0))
        if m == 8:
            m, e = 0, e + 1
        return np.uint8(sign | np.uint8(((e + 7) << 3) | m))

    @numba.njit(cache=True)
    def _quantize_store(k, v, rotation, slots, k_buf, v_buf, k_scale, v_scale, qmax, int8):
        T, H, D = k.shape
        y = np.empty(D, np.float32)
        c = np.float32((1 + 2 ** -8) / qmax)
        for t in range(T):
            s = slots[t]
            for which in range(2):
                x = k if which == 0 else v
                for h in range(H):
                    amax = np.float32(0.0)
                    for d in range(D):
                        acc = np.float32(0.0)
                        for e in range(D):
                            acc += x[t, h, e] * rotation[e, d]
                        y[d] = acc
                        amax = max(amax, abs(acc))
                    bits = _bf16_bits(amax * c) if amax > 0 else _bf16_bits(np.float32(1.0))
                    scale = _bf16_value(bits)
                    if which == 0:
                        k_scale[s, h] = bits
                    else:
                        v_scale[s, h] = bits
                    for d in range(D):
                        q = min(max(y[d] / scale, -qmax), qmax)
                        if int8:
                            code = np.uint8(np.int8(np.rint(q)))
                        else:
                            code = _fp8_e4m3(q)
                        if which == 0:
                            k_buf[s, h, d] = code
                        else:
                            v_buf[s, h, d] = code


def quantize_store(k: np.ndarray, v: np.ndarray, rotation: np.ndarray, slots: np.ndarray, k_buf: np.ndarray,
                   v_buf: np.ndarray, k_scale: np.ndarray, v_scale: np.ndarray, qmax: float) -> None:
    """See the top of this file; the pool arrays are uint8 views of its bytes and int16 views of its scales."""
    _quantize_store(k, v, rotation, slots, k_buf, v_buf, k_scale, v_scale, np.float32(qmax), qmax == 127.0)
