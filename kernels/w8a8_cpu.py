"""W8A8 matmul for the CPU, the 8-bit twin of w4a8_cpu.py: weights of at most 8 bits in blocks of 16 or 32 inputs
(w = d*q + m, q 0..255) times bfloat16 activations that the kernel quantizes per block of 32 exactly as the W4A8
kernel does (one or two int8 digits), with integer dot products (AVX-512 VNNI where the CPU has it, else plain C).
GGUF Q8_0, Q5_0, Q5_1 and Q5_K (blocks or sub-blocks of 32) and Q6_K and Q3_K (sub-blocks of 16, scale d times an
integer) are such grids exactly: the kernel reads their own integers and scales.

pack() stores each matrix in the most compact layout that holds it exactly (a decode step reads every weight, so
bytes are time): q in 5 bits where every block's integers span 32 steps (Q5_0, Q5_1: 5.5 bits a weight with
float16 scales), in 6 bits where blocks of 16 span 64 steps around zero (Q6_K); d and m in float16 where they are
float16 values (a file's own scales), d of blocks of 16 as an int8 times a float16 per 16 blocks where it is
that (Q6_K's and Q3_K's d * sc); no minimum where every block is whole steps from zero (Q8_0, Q5_0, Q6_K: m =
-2**(bits-1) * d). Q8_0 reads 8.5 bits a weight, Q5_0 5.5, Q6_K 6.5625 (what the file holds), against 10-12 with a
float32 scale and minimum each.

The kernel is C (`w8a8_cpu.c`), built and cached like w4a8_cpu.c (kernels/native.py); what the two share, C and
Python, is in native.h and block_gemm.py.

    pack(q, d, m, group) -> W8A8Weights   q [N, K] ints 0..255, d/m [N, K/group]: w = d[n, k/group] * q + m[...]
    unpack(w) -> (q, d, m)                the stored integers and their d and m (float32): the same weights
    w8a8_linear(x, w, digits) -> y        x [M, K] bf16 -> y [M, N] bf16 on torch's thread count
    w8a8_linear_ref(x, w, digits) -> y    the same arithmetic in torch (float64 sums), the tests' reference
    gemm_call()                           the kernel over plain ints, unchecked (the runtime's Linear checks once)
    quantize_activations(x, group, digits) the kernel's own int8 activations and scales (the tests compare them)

Shapes the kernel takes: K % 32 == 0, N % 16 == 0 (`fits`), group 16 or 32.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .block_gemm import check_call, fits, quantize_activations_ref, scales_from_tiles, scales_to_tiles
from .native import NativeLibrary

GROUPS = (16, 32)
SCALES = ("float32", "float16", "int8 x float16")   # the kernel's scale kinds, by number (w8a8_cpu.c)


def _declare(lib: ctypes.CDLL) -> None:
    lib.w8a8_gemm.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 9
    lib.w8a8_gemm.restype = ctypes.c_int
    lib.w8a8_quantize.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 4 + [ctypes.c_void_p] * 3
    lib.w8a8_quantize.restype = None


_NATIVE = NativeLibrary(Path(__file__).with_name("w8a8_cpu.c"), _declare, isa_symbol="w8a8_isa")
_state: dict[str, object] = {}        # "call": gemm_call()'s function

# as in w4a8_cpu.py: the library, built on first call, and what it says; where it cannot be built: None, False
library = _NATIVE.load                          # () -> ctypes.CDLL | None
available = _NATIVE.available                   # () -> bool
unavailable_reason = _NATIVE.unavailable_reason  # () -> str | None
isa = _NATIVE.isa                               # () -> "avx512_vnni" | "scalar" | None
build_id = _NATIVE.build_id                     # () -> the build's hash
_build = _NATIVE.build                          # (march) -> a fresh build ("x86-64": the portable path tests check)


class W8A8Weights(NamedTuple):
    qw: torch.Tensor     # uint8 in tiles of 16 rows (layout: w8a8_cpu.c): [N, K * bits/8]
    wd: torch.Tensor     # [N, K/group] float32, float16 or (scales 2) int8: d per block, tiles [N/16][K/group][16]
    wm: torch.Tensor     # the same for m, empty when sym; scales 2: D [N, K/256] float16, d = wd * D per 16 blocks
    group: int
    bits: int = 8        # 8: q 0..255; 5: q 0..31 (a nibble and a bit plane); 6: q 0..63 (a nibble, two planes)
    scales: int = 0      # SCALES' index: how d (and m) are stored
    sym: bool = False    # no stored minimum: m = -2**(bits-1) * d

    @property
    def shape(self) -> tuple[int, int]:
        return self.qw.shape[0], self.wd.shape[1] * self.group

    @property
    def nbytes(self) -> int:
        return self.qw.numel() + self.wd.element_size() * self.wd.numel() + self.wm.element_size() * self.wm.numel()

    @property
    def layout(self) -> str:
        return f"{self.bits}-bit, {SCALES[self.scales]} d{'' if self.sym else ' and m'}"


def pack(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, group: int) -> W8A8Weights:
    """q [N, K] integers in 0..255; d, m [N, K/group]: w = d * q + m per block. Stored in the most compact layout
    that holds these weights exactly (module docstring)."""
    N, K = q.shape
    if group not in GROUPS:
        raise ValueError(f"w8a8 takes blocks of {GROUPS} inputs, got {group}")
    if not fits(N, K):
        raise ValueError(f"w8a8 needs in_features % 32 == 0 and out_features % 16 == 0, got [{N}, {K}]")
    if d.shape != (N, K // group) or m.shape != (N, K // group):
        raise ValueError(f"d and m must be [{N}, {K // group}], got {tuple(d.shape)} and {tuple(m.shape)}")
    if int(q.min()) < 0 or int(q.max()) > 255:
        raise ValueError(f"w8a8 weights must be integers 0..255, got {int(q.min())}..{int(q.max())}")
    d, m, q = d.to(torch.float32), m.to(torch.float32), q.to(torch.int32)
    sym = bool((m == -128 * d).all())
    bits = 8
    if group == 16 and sym and int(q.min()) >= 128 - 32 and int(q.max()) <= 128 + 31:   # 6 bits around zero
        q, m, bits = q - 96, -32 * d, 6
    if group == 32:   # 5 bits where every block's integers lie in 32 steps: 0..31, or -16..15 around zero
        if sym:
            # a block of -15..16 steps (a Q5_0 block whose largest weight is positive: the file's d < 0) turns
            # over: -d times -(q - 128) is the same weight
            blocks = q.view(N, K // group, group) - 128
            lo, hi = blocks.amin(-1), blocks.amax(-1)
            flip = hi > 15
            if bool(((lo >= -16) & (hi <= 15) | (lo >= -15) & (hi <= 16)).all()):
                q = (torch.where(flip[..., None], -blocks, blocks) + 16).view(N, K)
                d = torch.where(flip, -d, d)
                m, bits = -16 * d, 5
        elif int(q.max()) <= 31:
            bits = 5
    T = N // 16
    if bits == 8:   # (tile, row, quad, j) -> (tile, quad, row, j)
        qw = q.to(torch.uint8).view(T, 16, K // 4, 4).permute(0, 2, 1, 3).reshape(N, K).contiguous()
    else:
        qw = (_pack5 if bits == 5 else _pack6)(q.to(torch.uint8), T, K)
    if all(bool((v.half().float() == v).all()) for v in ((d,) if sym else (d, m))):
        return W8A8Weights(qw, scales_to_tiles(d, torch.float16), torch.empty(0, dtype=torch.float16) if sym
                           else scales_to_tiles(m, torch.float16), group, bits, 1, sym)
    if sym and group == 16 and (factors := _int8_scales(d)) is not None:
        sc, D = factors
        return W8A8Weights(qw, scales_to_tiles(sc, torch.int8), scales_to_tiles(D, torch.float16), group, bits, 2,
                           True)
    return W8A8Weights(qw, scales_to_tiles(d, torch.float32), torch.empty(0) if sym
                       else scales_to_tiles(m, torch.float32), group, bits, 0, sym)


def _int8_scales(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """d [N, K/16] float32 as sc [N, K/16] int8 times D [N, K/256] float16 per 16 blocks, exactly, or None. Q6_K
    writes d = D * sc with the largest |sc| -128 (llama.cpp's quantizer) or 127 (others), so each 16 blocks' D is
    their largest |d| over one of those, signed to match; every product is checked."""
    N, ng = d.shape
    if ng % 16:
        return None
    v = d.view(N, ng // 16, 16)
    top = v.gather(-1, v.abs().argmax(-1, keepdim=True))                       # [N, S, 1] the largest |d|, signed
    found = []
    for div in (-128.0, 127.0):
        D = (top / div).half().float()
        sc = torch.where(D == 0, torch.zeros_like(v), v / torch.where(D == 0, torch.ones_like(D), D)).round()
        found.append((sc, D, ((sc >= -128) & (sc <= 127) & (sc * D == v)).all(-1, keepdim=True)))   # ok [N, S, 1]
    (sc, D, ok), (sc2, D2, ok2) = found
    if not bool((ok | ok2).all()):
        return None
    sc, D = torch.where(ok, sc, sc2), torch.where(ok, D, D2)
    return sc.to(torch.int8).view(N, ng), D.squeeze(-1).half()


def _pack5(q: torch.Tensor, T: int, K: int) -> torch.Tensor:
    """q [N, K] uint8 0..31 -> [N, K * 5/8]: per tile and block of 32, 256 bytes of nibbles in w4a8_cpu.c's order,
    then 8 uint64 masks (w8a8_cpu.c): a low nibble holds q & 15 and its mask bit q >> 4; a high nibble q >> 1 and
    its mask bit q & 1."""
    nb = K // 32
    blocks = q.view(T, 16, nb, 32).permute(0, 2, 1, 3).view(T, nb, 16, 4, 2, 4)   # row, quarter h, half, j
    first, second = blocks[..., 0, :], blocks[..., 1, :]
    nib = ((first & 15) | (second >> 1) << 4).permute(0, 1, 3, 2, 4).reshape(T, nb, 256)    # (h, row, j)
    bit = torch.stack([first >> 4, second & 1], -2)                     # row, h, half, j: mask c = 2h + half
    # bit 4r + j of mask c
    mask_bytes = _bit_bytes(bit.view(T, nb, 16, 8, 4).permute(0, 1, 3, 2, 4).reshape(T, nb, 8, 64))
    return torch.cat([nib, mask_bytes], -1).reshape(T * 16, -1).contiguous()


def _bit_bytes(bits: torch.Tensor) -> torch.Tensor:
    """bits [..., 8, 64] of 0/1 -> [..., 64] uint8: each 64 bits a little-endian uint64 mask (bit i of mask c)."""
    packed = np.packbits(bits.to(torch.uint8).contiguous().numpy(), axis=-1, bitorder="little")   # [..., 8, 8]
    return torch.from_numpy(packed).reshape(*bits.shape[:-2], 64)


def _byte_bits(masks: torch.Tensor) -> torch.Tensor:
    """_bit_bytes' inverse: [..., 64] uint8 (8 little-endian uint64 masks) -> [..., 8, 64] 0/1 as int64."""
    bits = np.unpackbits(masks.contiguous().numpy().reshape(*masks.shape[:-1], 8, 8), axis=-1, bitorder="little")
    return torch.from_numpy(bits).to(torch.int64)


def _pack6(q: torch.Tensor, T: int, K: int) -> torch.Tensor:
    """q [N, K] uint8 0..63 -> [N, K * 6/8]: per tile and block of 16, 128 bytes of nibbles (half h, row, j), then
    8 uint64 masks, mask 2c + p for quad c (w8a8_cpu.c): a low nibble holds q & 15, its masks q's bits 4 and 5; a
    high nibble q >> 2, its masks q's bits 1 and 0."""
    nb = K // 16
    blocks = q.view(T, 16, nb, 16).permute(0, 2, 1, 3).reshape(T, nb, 16, 2, 2, 4)   # row, half h, quad half, j
    first, second = blocks[..., 0, :], blocks[..., 1, :]                          # quads 2h and 2h + 1
    nib = ((first & 15) | (second >> 2) << 4).permute(0, 1, 3, 2, 4).reshape(T, nb, 128)    # (h, row, j)
    planes = torch.stack([(first >> 4) & 1, first >> 5, (second >> 1) & 1, second & 1], -2)  # row, h, 4 planes, j
    # bit 4r + j of mask 2c + p
    mask_bytes = _bit_bytes(planes.view(T, nb, 16, 8, 4).permute(0, 1, 3, 2, 4).reshape(T, nb, 8, 64))
    return torch.cat([nib, mask_bytes], -1).reshape(T * 16, -1).contiguous()


def _unpack6(qw: torch.Tensor, T: int, K: int) -> torch.Tensor:
    nb = K // 16
    blk = qw.view(T, nb, 192)
    nib = blk[..., :128].view(T, nb, 2, 16, 4).permute(0, 1, 3, 2, 4).to(torch.int64)   # tile, block, row, h, j
    bits = _byte_bits(blk[..., 128:]).view(T, nb, 8, 16, 4).permute(0, 1, 3, 2, 4)   # row, 2c+p, j
    bits = bits.reshape(T, nb, 16, 2, 4, 4)                                       # row, h, plane, j
    first = (nib & 15) | bits[..., 0, :] << 4 | bits[..., 1, :] << 5
    second = (nib >> 4) << 2 | bits[..., 2, :] << 1 | bits[..., 3, :]
    q = torch.stack([first, second], -2).reshape(T, nb, 16, 16)         # (h, quad half, j)
    return q.permute(0, 2, 1, 3).reshape(T * 16, K).to(torch.uint8)


def _unpack5(qw: torch.Tensor, T: int, K: int) -> torch.Tensor:
    nb = K // 32
    blk = qw.view(T, nb, 320)
    nib = blk[..., :256].view(T, nb, 4, 16, 4).permute(0, 1, 3, 2, 4).to(torch.int64)   # tile, block, row, h, j
    bits = _byte_bits(blk[..., 256:]).view(T, nb, 8, 16, 4).permute(0, 1, 3, 2, 4)   # row, c, j
    first = (nib & 15) | bits[..., 0::2, :] << 4
    second = (nib >> 4) << 1 | bits[..., 1::2, :]
    q = torch.stack([first, second], -2).reshape(T, nb, 16, 32)         # (h, half, j)
    return q.permute(0, 2, 1, 3).reshape(T * 16, K).to(torch.uint8)


def unpack(w: W8A8Weights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The stored integers and their scales in natural order: (q [N, K] uint8, d, m [N, K/group] float32), with
    w = d * q + m (for sym layouts m is the implied -2**(bits-1) * d)."""
    N, K = w.shape
    T = N // 16
    q = w.qw.view(T, K // 4, 16, 4).permute(0, 2, 1, 3).reshape(N, K) if w.bits == 8 else \
        (_unpack5 if w.bits == 5 else _unpack6)(w.qw, T, K)
    d = scales_from_tiles(w.wd).float()
    if w.scales == 2:
        d = d * scales_from_tiles(w.wm).float().repeat_interleave(16, dim=1)
    return q, d, -(1 << (w.bits - 1)) * d if w.sym else scales_from_tiles(w.wm).float()


def gemm_call():
    """The kernel as a function of plain ints (qw, wd, wm, x, y pointers; M, N, K, group, bits, scales, sym, digits,
    threads) -> status, unchecked: through numba where it is installed (about 1 µs a call), else ctypes."""
    if "call" not in _state:
        fn = library().w8a8_gemm
        try:
            import numba
        except ImportError:
            _state["call"] = fn
        else:
            _state["call"] = numba.njit(lambda qw, wd, wm, x, y, M, N, K, group, bits, scales, sym, digits, threads:
                                        fn(qw, wd, wm, x, y, M, N, K, group, bits, scales, sym, digits, threads))
    return _state["call"]


def w8a8_linear(x: torch.Tensor, w: W8A8Weights, digits: int = 1, out: torch.Tensor | None = None,
                lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """x [M, K] bfloat16 (CPU, contiguous) -> [M, N] bfloat16 (`out` when given), on torch's thread count;
    digits as in w4a8_cpu.w4a8_linear."""
    N, K = w.shape
    check_call("w8a8_linear", x, K, digits)
    lib = lib or library()
    if lib is None:
        raise RuntimeError(f"the w8a8 CPU kernel is unavailable: {unavailable_reason()}")
    M = x.shape[0]
    y = torch.empty((M, N), dtype=torch.bfloat16) if out is None else out
    if M and lib.w8a8_gemm(w.qw.data_ptr(), w.wd.data_ptr(), w.wm.data_ptr(), x.data_ptr(), y.data_ptr(),
                           M, N, K, w.group, w.bits, w.scales, int(w.sym), digits, torch.get_num_threads()) != 0:
        raise MemoryError(f"w8a8_linear: out of memory for a [{M}, {K}] x [{N}, {K}] matmul")
    return y


def quantize_activations(x: torch.Tensor, group: int, digits: int, lib: ctypes.CDLL | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel's own quantized activations (for tests): x [M, K] bfloat16 -> (a [M, digits, K] int8, s [M, K/32]
    float32, sa [M, K/group] float32: s times the sum of each weight block's integers, digits combined)."""
    lib = lib or library()
    M, K = x.shape
    x = x.contiguous()
    a = torch.empty(M, digits, K, dtype=torch.int8)
    s, sa = torch.empty(M, K // 32), torch.empty(M, K // group)
    lib.w8a8_quantize(x.data_ptr(), M, K, group, digits, a.data_ptr(), s.data_ptr(), sa.data_ptr())
    return a, s, sa


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
