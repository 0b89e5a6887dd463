"""W4A8 matmul for the CPU: 4-bit weights in blocks of 32 (w = d*q + m, GGUF Q4_1's own grid) times bfloat16
activations that the kernel quantizes to int8 per block of 32, with integer dot products (AVX-512 VNNI where the
CPU has it, else AVX2, else plain C): what llama.cpp does for a Q4_1 model, and what torch's int4 CPU matmul
does not (it converts each weight to float, and costs as much per row at 32 rows as at one).

The kernel is C (`w4a8_cpu.c`), compiled on the machine at first use with the system C compiler (`$CC`, else
`cc`) and `-march=native`, and cached in `$SGLITE_CACHE` (default `~/.cache/sglite`) / `kernels/`, keyed by the
source and its header (native.h), the compiler and the CPU's flags. With no compiler, or `SGLITE_NATIVE_KERNELS=0`,
`available()` is False and the runtime does not offer the format (`unavailable_reason()` says why).

    pack(q, d, m) -> W4A8Weights        q [N, K] ints 0..15, d/m [N, K/32]: w[n, k] = d[n, k/32] * q + m[...]
    unpack(w) -> (q, d, m)              pack's inverse
    w4a8_linear(x, w, digits) -> y      x [M, K] bf16 -> y [M, N] bf16 on torch's thread count; digits 1: one int8
                                        per activation, 2: two (about 15 bits)
    w4a8_linear_ref(x, w, digits) -> y  the same arithmetic in torch (float64 sums), the tests' reference
    quantize_activations(x, digits)     the kernel's own int8 activations and scales (the tests compare them)
    gemm_call()                         the kernel over plain ints, unchecked (the runtime's Linear checks once)

Shapes the kernel takes: K % 32 == 0, N % 16 == 0 (`fits`). What it shares with its 8-bit twin (w8a8_cpu.py) is in
block_gemm.py.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import NamedTuple

import torch

from .block_gemm import check_call, fits, quantize_activations_ref, scales_from_tiles, scales_to_tiles
from .native import NativeLibrary


def _declare(lib: ctypes.CDLL) -> None:
    lib.w4a8_gemm.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 6
    lib.w4a8_gemm.restype = ctypes.c_int
    lib.w4a8_quantize.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3
    lib.w4a8_quantize.restype = None


_NATIVE = NativeLibrary(Path(__file__).with_name("w4a8_cpu.c"), _declare, isa_symbol="w4a8_isa")
_state: dict[str, object] = {}        # "call": gemm_call()'s function

# The library, built on first call (kernels/native.py), and what it says; where it cannot be built: None, False
library = _NATIVE.load                          # () -> ctypes.CDLL | None
available = _NATIVE.available                   # () -> bool
unavailable_reason = _NATIVE.unavailable_reason  # () -> str | None: why not (no compiler, SGLITE_NATIVE_KERNELS=0)
isa = _NATIVE.isa                               # () -> "avx512_vnni" | "avx2" | "scalar" | None
build_id = _NATIVE.build_id                     # () -> the build's hash, for caches of what was measured with it
_build = _NATIVE.build                          # (march) -> a fresh build ("x86-64": the portable path tests check)


class W4A8Weights(NamedTuple):
    qw: torch.Tensor     # [N, K/2] uint8 in tiles of 16 rows (layout: w4a8_cpu.c)
    wd: torch.Tensor     # [N, K/32] float16: d per block, in tiles: [N/16][K/32][16]
    wm: torch.Tensor     # [N, K/32] float16: m per block, the same way; empty when sym
    sym: bool = False    # every block whole steps from zero (Q4_0): m = -8 d, not stored

    @property
    def shape(self) -> tuple[int, int]:
        return self.qw.shape[0], self.qw.shape[1] * 2

    @property
    def nbytes(self) -> int:
        return self.qw.numel() + 2 * (self.wd.numel() + self.wm.numel())


def pack(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> W4A8Weights:
    """q [N, K] integers in 0..15; d, m [N, K/32] (any float dtype; stored as float16). Where every m is -8 d
    (Q4_0's blocks, a symmetric grid) m is not stored: 4.5 bits a weight instead of 5."""
    N, K = q.shape
    if not fits(N, K):
        raise ValueError(f"w4a8 needs in_features % 32 == 0 and out_features % 16 == 0, got [{N}, {K}]")
    if d.shape != (N, K // 32) or m.shape != (N, K // 32):
        raise ValueError(f"d and m must be [{N}, {K // 32}], got {tuple(d.shape)} and {tuple(m.shape)}")
    T, nb = N // 16, K // 32
    # (tile, row, block, quarter, half, j) -> (tile, block, quarter, row, j, half); half 0 low nibble, 1 high
    q6 = q.to(torch.uint8).view(T, 16, nb, 4, 2, 4).permute(0, 2, 3, 1, 5, 4)
    qw = (q6[..., 0] | (q6[..., 1] << 4)).reshape(N, K // 2).contiguous()
    d16, m16 = d.to(torch.float16), m.to(torch.float16)
    if bool((m16 == -8 * d16).all()):
        return W4A8Weights(qw, scales_to_tiles(d16, torch.float16), torch.empty(0, dtype=torch.float16), True)
    return W4A8Weights(qw, scales_to_tiles(d16, torch.float16), scales_to_tiles(m16, torch.float16))


def unpack(w: W4A8Weights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pack's inverse: (q [N, K] uint8, d, m [N, K/32] float16) in natural order (m = -8 d when sym)."""
    N, K = w.shape
    T, nb = N // 16, K // 32
    b = w.qw.view(T, nb, 4, 16, 4)
    q = torch.stack([b & 0x0F, b >> 4], dim=-1).permute(0, 3, 1, 2, 5, 4).reshape(N, K)
    d = scales_from_tiles(w.wd)
    return q, d, -8 * d if w.sym else scales_from_tiles(w.wm)


def gemm_call():
    """The kernel as a function of plain ints (qw, wd, wm, x, y pointers; M, N, K, sym, digits, threads) -> status,
    unchecked, for callers that check shapes once (runtime/linear.py): through numba, about 1 µs a call
    against ctypes' 2-3 µs; ctypes where numba is missing."""
    if "call" not in _state:
        fn = library().w4a8_gemm
        try:
            import numba
        except ImportError:
            _state["call"] = fn
        else:
            _state["call"] = numba.njit(lambda qw, wd, wm, x, y, M, N, K, sym, digits, threads:
                                        fn(qw, wd, wm, x, y, M, N, K, sym, digits, threads))
    return _state["call"]


def w4a8_linear(x: torch.Tensor, w: W4A8Weights, digits: int = 1, out: torch.Tensor | None = None,
                lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """x [M, K] bfloat16 (CPU, contiguous) -> [M, N] bfloat16 (`out` when given), on torch's thread count.
    digits: 1 quantizes activations to one int8 per value; 2 adds a second int8 digit for what the first left
    (about 15 bits per block of 32, finer than bfloat16; twice the integer work)."""
    N, K = w.shape
    check_call("w4a8_linear", x, K, digits)
    lib = lib or library()
    if lib is None:
        raise RuntimeError(f"the w4a8 CPU kernel is unavailable: {unavailable_reason()}")
    M = x.shape[0]
    y = torch.empty((M, N), dtype=torch.bfloat16) if out is None else out
    if M and lib.w4a8_gemm(w.qw.data_ptr(), w.wd.data_ptr(), w.wm.data_ptr(), x.data_ptr(), y.data_ptr(),
                           M, N, K, int(w.sym), digits, torch.get_num_threads()) != 0:
        raise MemoryError(f"w4a8_linear: out of memory for a [{M}, {K}] x [{N}, {K}] matmul")
    return y


def quantize_activations(x: torch.Tensor, digits: int, lib: ctypes.CDLL | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel's own quantized activations (for tests): x [M, K] bfloat16 -> (a [M, digits, K] int8, s and sa
    [M, K/32] float32: the block scales and s times the sum of each block's integers, digits combined)."""
    lib = lib or library()
    M, K = x.shape
    x = x.contiguous()
    a = torch.empty(M, digits, K, dtype=torch.int8)
    s, sa = torch.empty(M, K // 32), torch.empty(M, K // 32)
    lib.w4a8_quantize(x.data_ptr(), M, K, digits, a.data_ptr(), s.data_ptr(), sa.data_ptr())
    return a, s, sa


def w4a8_linear_ref(x: torch.Tensor, w: W4A8Weights, digits: int = 1) -> torch.Tensor:
    """The kernel's arithmetic in torch: activations quantized the same way, sums in float64."""
    N, K = w.shape
    a, s = quantize_activations_ref(x, digits)
    q, d, mm = unpack(w)
    q = q.view(N, K // 32, 32).double()                                        # [N, K/32, 32]
    dots = torch.einsum("mbj,nbj->mnb", a.double(), q)                          # [M, N, K/32] exact integers
    d, mm = d.double(), mm.double()                                            # [N, K/32]
    y = (dots * d[None] * s[:, None, :, 0]).sum(-1) + (mm[None] * (s[..., 0] * a.double().sum(-1))[:, None]).sum(-1)
    return y.to(torch.bfloat16)
