"""W8A8 matmul for the CPU, the 8-bit twin of w4a8_cpu.py: 8-bit weights in blocks of 16 or 32 inputs
(w = d*q + m, q 0..255, d and m float32) times bfloat16 activations that the kernel quantizes per block of 32
exactly as the W4A8 kernel does (one or two int8 digits), with integer dot products (AVX-512 VNNI where the CPU
has it, else plain C). GGUF Q8_0, Q5_0, Q5_1 and Q5_K (blocks or sub-blocks of 32) and Q6_K and Q3_K (sub-blocks
of 16, scale d times an integer) are such grids exactly: the kernel reads their own integers and scales.

The kernel is C (`w8a8_cpu.c`), built and cached like w4a8_cpu.c (kernels/native.py).

    pack(q, d, m, group) -> W8A8Weights   q [N, K] ints 0..255, d/m [N, K/group]: w = d[n, k/group] * q + m[...]
    unpack(w) -> (q, d, m)                pack's inverse
    w8a8_linear(x, w, digits) -> y        x [M, K] bf16 -> y [M, N] bf16 on torch's thread count
    w8a8_linear_ref(x, w, digits) -> y    the same arithmetic in torch (float64 sums), the tests' reference
    gemm_call()                           the kernel over plain ints, unchecked (the runtime's Linear checks once)

Shapes the kernel takes: K % 32 == 0, N % 16 == 0 (`fits`), group 16 or 32.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import NamedTuple

import torch

from .native import NativeLibrary
from .w4a8_cpu import quantize_activations_ref

GROUPS = (16, 32)


def _declare(lib: ctypes.CDLL) -> None:
    lib.w8a8_gemm.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 6
    lib.w8a8_gemm.restype = ctypes.c_int
    lib.w8a8_isa.restype = ctypes.c_char_p


_NATIVE = NativeLibrary(Path(__file__).with_name("w8a8_cpu.c"), _declare,
                        describe=lambda lib: lib.w8a8_isa().decode())
_state: dict[str, object] = {}        # "call": gemm_call()'s function


class W8A8Weights(NamedTuple):
    qw: torch.Tensor     # [N, K] uint8 in tiles of 16 rows (layout: w8a8_cpu.c)
    wd: torch.Tensor     # [N, K/group] float32: d per block, in tiles: [N/16][K/group][16]
    wm: torch.Tensor     # [N, K/group] float32: m per block, the same way
    group: int

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.qw.shape)

    @property
    def nbytes(self) -> int:
        return self.qw.numel() + 4 * (self.wd.numel() + self.wm.numel())


def fits(out_features: int, in_features: int) -> bool:
    return in_features % 32 == 0 and out_features % 16 == 0


def _build(march: str = "native") -> ctypes.CDLL:
    """A fresh build for `-march=<march>` ("x86-64": the portable path the tests also check)."""
    return _NATIVE.build(march)


def library() -> ctypes.CDLL | None:
    return _NATIVE.load()


def available() -> bool:
    return library() is not None


def unavailable_reason() -> str | None:
    return None if available() else str(_NATIVE.why)


def isa() -> str | None:
    lib = library()
    return None if lib is None else lib.w8a8_isa().decode()


def pack(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, group: int) -> W8A8Weights:
    """q [N, K] integers in 0..255; d, m [N, K/group] (stored as float32)."""
    N, K = q.shape
    if group not in GROUPS:
        raise ValueError(f"w8a8 takes blocks of {GROUPS} inputs, got {group}")
    if not fits(N, K):
        raise ValueError(f"w8a8 needs in_features % 32 == 0 and out_features % 16 == 0, got [{N}, {K}]")
    if d.shape != (N, K // group) or m.shape != (N, K // group):
        raise ValueError(f"d and m must be [{N}, {K // group}], got {tuple(d.shape)} and {tuple(m.shape)}")
    if int(q.min()) < 0 or int(q.max()) > 255:
        raise ValueError(f"w8a8 weights must be integers 0..255, got {int(q.min())}..{int(q.max())}")
    T, nq, ng = N // 16, K // 4, K // group
    # (tile, row, quad, j) -> (tile, quad, row, j)
    qw = q.to(torch.uint8).view(T, 16, nq, 4).permute(0, 2, 1, 3).reshape(N, K).contiguous()

    def by_tile(v: torch.Tensor) -> torch.Tensor:      # [N, ng] -> a tile's block, 16 rows
        return v.to(torch.float32).view(T, 16, ng).transpose(1, 2).reshape(N, ng).contiguous()

    return W8A8Weights(qw, by_tile(d), by_tile(m), group)


def unpack(w: W8A8Weights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pack's inverse: (q [N, K] uint8, d, m [N, K/group] float32) in natural order."""
    N, K = w.shape
    T, ng = N // 16, K // w.group
    q = w.qw.view(T, K // 4, 16, 4).permute(0, 2, 1, 3).reshape(N, K)

    def natural(v: torch.Tensor) -> torch.Tensor:
        return v.view(T, ng, 16).transpose(1, 2).reshape(N, ng)

    return q, natural(w.wd), natural(w.wm)


def gemm_call():
    """The kernel as a function of plain ints (qw, wd, wm, x, y pointers; M, N, K, group, digits, threads) ->
    status, unchecked: through numba where it is installed (about 1 µs a call), else ctypes."""
    if "call" not in _state:
        fn = library().w8a8_gemm
        try:
            import numba
        except ImportError:
            _state["call"] = fn
        else:
            _state["call"] = numba.njit(lambda qw, wd, wm, x, y, M, N, K, group, digits, threads:
                                        fn(qw, wd, wm, x, y, M, N, K, group, digits, threads))
    return _state["call"]


def w8a8_linear(x: torch.Tensor, w: W8A8Weights, digits: int = 1, out: torch.Tensor | None = None,
                lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """x [M, K] bfloat16 (CPU, contiguous) -> [M, N] bfloat16 (`out` when given), on torch's thread count;
    digits as in w4a8_cpu.w4a8_linear."""
    if digits not in (1, 2):
        raise ValueError(f"digits must be 1 or 2, got {digits!r}")
    lib = lib or library()
    if lib is None:
        raise RuntimeError(f"the w8a8 CPU kernel is unavailable: {unavailable_reason()}")
    N, K = w.shape
    if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[1] != K or not x.is_contiguous():
        raise ValueError(f"w8a8_linear takes x as a contiguous [M, {K}] bfloat16 tensor, got "
                         f"{x.dtype} {tuple(x.shape)}{'' if x.is_contiguous() else ' (not contiguous)'}")
    M = x.shape[0]
    y = torch.empty((M, N), dtype=torch.bfloat16) if out is None else out
    if M and lib.w8a8_gemm(w.qw.data_ptr(), w.wd.data_ptr(), w.wm.data_ptr(), x.data_ptr(), y.data_ptr(),
                           M, N, K, w.group, digits, torch.get_num_threads()) != 0:
        raise MemoryError(f"w8a8_linear: out of memory for a [{M}, {K}] x [{N}, {K}] matmul")
    return y


def w8a8_linear_ref(x: torch.Tensor, w: W8A8Weights, digits: int = 1) -> torch.Tensor:
    """The kernel's arithmetic in torch: activations quantized as w4a8_cpu.w4a8_linear_ref does, sums in
    float64."""
    N, K = w.shape
    M, G = x.shape[0], w.group
    a, s = quantize_activations_ref(x, digits)
    per = 32 // G                                                              # weight blocks per activation block
    a = a.double().reshape(M, K // G, G)
    s = s.repeat_interleave(per, dim=1)[..., 0]                                # [M, K/G]
    q, d, mm = unpack(w)
    dots = torch.einsum("mbj,nbj->mnb", a, q.view(N, K // G, G).double())      # [M, N, K/G] exact integers
    d, mm = d.double(), mm.double()
    y = (dots * d[None] * s[:, None]).sum(-1) + (mm[None] * (s * a.sum(-1))[:, None]).sum(-1)
    return y.to(torch.bfloat16)
