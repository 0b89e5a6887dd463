"""Linear layers in each weight format: one callable per projection, `y = layer(x)`.

Formats (WEIGHT_FORMATS):
    fp32  dense float32 weights, float32 activations: the reference, bit-for-bit the plain `F.linear`.
    bf16  dense bfloat16 weights and activations.
    int8  int8 weights, one scale per output channel (symmetric), bfloat16 activations.
    int4  4-bit weights in groups of 32 along the input axis, a scale and a zero per group (asymmetric),
          bfloat16 activations, for weights that already lie on such a grid: a GGUF Q4_0/Q4_1 tensor (blocks
          of 32: w = d*q + m) requantizes to exactly its own d, m and q (bar bf16 rounding of d and m). Any
          other weight (an 8-bit or float source, e.g. SmolLM2's Q8_0 embedding/head) would lose precision
          in 4 bits and becomes int8 instead: int4 never costs fidelity beyond int8's.
    w4a16 the same 4-bit weights, with the bfloat16 activations quantized inside the kernel per block of 32
          to two int8 digits (about 15 bits, finer than bfloat16) and integer dot products (kernels/w4a8_cpu.py,
          built on the machine; offered only where it builds). Weights on an 8-bit block grid instead (GGUF
          Q5_0, Q5_1, Q8_0, Q5_K and IQ4's table per 32, Q2_K/Q3_K/Q6_K per 16: block_grid(w, 8, group)) run
          exactly on its 8-bit twin (kernels/w8a8_cpu.py, same activation quantization) where that has AVX-512
          VNNI; without it, the grids of 32 run on the 4-bit kernel as their low and high nibbles over the input
          twice (split_nibbles). Weights off every grid (float weights), or of shapes the kernels cannot take,
          become int8 as with int4.
    w4a8  as w4a16 with one int8 digit per activation, as llama.cpp quantizes them: faster, but below the
          fidelity gate on SmolLM2 (96.7% top-1), so offered only by name.

Every layer maps x [T, in] in its activation dtype to [T, out] in the same dtype. `SizedLinear` holds two
formats of one weight and runs decode rows (few per pass, bound by reading weights) in one and prefill rows
(many, bound by arithmetic) in the other, so each phase uses its fastest format.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from sglite.kernels import head_refine_cpu, registry, w4a8_cpu, w8a8_cpu

WEIGHT_FORMATS = ("fp32", "bf16", "int8", "int4", "w4a16", "w4a8")
KERNEL_DIGITS = {"w4a16": 2, "w4a8": 1}     # formats on kernels/w4a8_cpu.py: int8 digits per activation
# the approximate head of a decode pass only ranks candidates (RefinedHead recomputes the top ones in float32), so
# two activation digits buy it nothing one does not: on a CPU whose integer multiplies limit the kernel, one
# digit does about half the head's arithmetic (the biggest matrix: 2.0 -> 1.55 ms a batch-1 step on a Zen 1)
RANKING_FORMAT = {"w4a16": "w4a8"}
FOUR_BIT_FORMATS = ("int4", *KERNEL_DIGITS)
INT4_GROUP = 32


def activation_dtype(fmt: str) -> torch.dtype:
    """The dtype activations (and the KV cache) use beside weights of format `fmt`."""
    return torch.float32 if fmt == "fp32" else torch.bfloat16


class Linear(Protocol):
    in_features: int
    out_features: int
    dtype: torch.dtype        # activation dtype in and out

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """x [T, in] -> [T, out]; `out`: a contiguous [T, out_features] tensor of the activation dtype to write
        into and return (rows are independent, so a caller may hand row slices of one buffer)."""

    @property
    def nbytes(self) -> int: ...


class DenseLinear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.weight = weight.contiguous()           # [out, in]
        self.bias = bias
        self.out_features, self.in_features = weight.shape
        self.dtype = weight.dtype

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        return _into(F.linear(x, self.weight, self.bias), out)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()


class Int8Linear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        w = weight.float()
        scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)                 # [out]
        self.qweight = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        self.scales = scales.to(torch.bfloat16)
        self.bias = None if bias is None else bias.to(torch.bfloat16)
        self.out_features, self.in_features = weight.shape
        self.dtype = torch.bfloat16

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        y = torch._weight_int8pack_mm(x, self.qweight, self.scales)
        return _into(y if self.bias is None else y + self.bias, out)

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() + 2 * self.scales.numel()


def block_grid(weight: torch.Tensor, bits: int = 4, group: int = INT4_GROUP, tolerance: float = 0.01):
    """(q [out, in] int32 in 0..2**bits - 1, scale [out, groups], lo [out, groups]) with weight = q * scale + lo
    per group of `group` inputs, or None when some group's weights lie off every such grid by more than
    `tolerance` steps (the weight was not a `bits`-bit block format to begin with).

    The grid is recovered from the values, whatever block format made them: GGUF Q4_0/Q4_1 and Q4_K's sub-blocks
    (scale d*sc, minimum dmin*m) at 4 bits; Q5_0, Q5_1 and Q8_0 (and Q4_K's) at 8. A group's step is its
    smallest gap between distinct values, or a small fraction of it. Where the group's values are whole steps
    from zero (Q4_0, Q5_0, Q8_0: w = d * q), lo is -2**(bits-1) steps, a power-of-two multiple of the file's d
    and so as exact as d in any float format (the scale is negative where the steps run -(2**(bits-1) - 1) ..
    2**(bits-1), as a Q4_0 block's negative d makes them); else lo is the group's least value (Q4_1, Q5_1,
    Q4_K's minimum)."""
    out_f, in_f = weight.shape
    if in_f % group or out_f % 16:                   # shapes the packed kernels (torch's, ours) cannot take
        return None
    w = weight.float().reshape(-1, group)                                         # [out * groups, group]
    lo = w.amin(dim=-1)
    levels, half = (1 << bits) - 1, 1 << (bits - 1)
    scale = torch.zeros_like(lo)
    zero = torch.zeros_like(lo, dtype=torch.bool)     # the group is whole steps from zero
    todo = torch.ones_like(lo, dtype=torch.bool)

    def attempt(rows: torch.Tensor, a: torch.Tensor, from_zero: bool, exact_lo: bool = False) -> None:
        """Marks the groups `rows` (indices) that step `a` [len(rows)] puts on the grid (`exact_lo`: only those
        whose least value and step float16 holds exactly, the latter to float32's rounding of the division)."""
        ws = w if len(rows) == len(w) else w[rows]
        st = (ws if from_zero else ws - lo[rows, None]) / a[:, None]
        r = st.round()
        # through zero, a value a hair off a step is a minimum the file stores (Q4_1's m near 0): that grid must
        # fit to float32's rounding of the values (1e-4 steps), not to `tolerance`
        exact = (st - r).abs().amax(-1) <= (min(tolerance, 1e-4) if from_zero else tolerance)
        if from_zero:   # steps -half..half-1 (scale a), or -(half-1)..half (scale -a: Q4_0's negative d)
            up = (r.amin(-1) >= -half) & (r.amax(-1) <= half - 1)
            hit = exact & (up | ((r.amin(-1) >= 1 - half) & (r.amax(-1) <= half)))
            scale[rows] = torch.where(hit, torch.where(up, a, -a), scale[rows])
            zero[rows] |= hit
        else:
            hit = exact & (r.amax(-1) <= levels)
            if exact_lo:
                hit &= (lo[rows].half().float() == lo[rows]) & ((a.half().float() - a).abs() <= a * 2 ** -20)
            scale[rows] = torch.where(hit, a, scale[rows])
        todo[rows] &= ~hit

    # a float weight is off the grid in nearly every group: a sample of groups says so at once
    if len(w) > 256 and block_grid(w[torch.linspace(0, len(w) - 1, 256).long()], bits, group, tolerance) is None:
        return None
    # the steps quantizers choose (one pass each over the groups still open), for every narrower block format
    # too (a Q4_1 block read as 8 bits keeps its own d): max|w| / 2**(b-1) (Q4_0, Q5_0: the largest weight on
    # the end step), max|w| / (2**(b-1) - 1) (Q8_0: 127), range / (2**b - 1) (Q4_1, Q5_1)
    amax = w.abs().amax(-1).clamp(min=1e-30)
    span = (w.amax(-1) - lo).clamp(min=1e-30)
    narrower = range(4, bits + 1)

    def steps(candidates) -> None:
        for a, from_zero in candidates:
            rows = todo.nonzero().squeeze(1)
            if len(rows):
                attempt(rows, a[rows], from_zero)

    # grids through zero first, so that a tensor of such blocks (Q4_0, Q5_0, Q8_0) is whole steps from zero in
    # every block (the W8A8 kernel then stores no minimum), not in all but the few whose range also happens to
    # divide evenly from their least value
    steps([(amax / (1 << (b - 1)), True) for b in narrower] + [(amax / ((1 << (b - 1)) - 1), True) for b in narrower])
    # then, in one pass, the full range in whole steps from a least value float16 holds (Q4_1 and Q5_1 store it
    # as m)
    rows = todo.nonzero().squeeze(1)
    if len(rows):
        attempt(rows, (span / levels)[rows], False, exact_lo=True)
    steps([(span / ((1 << b) - 1), False) for b in narrower])
    # the rest (Q4_K's optimized scales, blocks that skip the end steps): the smallest gap between distinct
    # values is a whole number of steps
    rows = todo.nonzero().squeeze(1)
    if len(rows):
        vals = w[rows].sort(dim=-1).values
        gaps = vals[:, 1:] - vals[:, :-1]
        span = vals[:, -1] - vals[:, 0]
        gap = torch.where(gaps > span[:, None] * 1e-5, gaps, torch.full_like(gaps, float("inf"))).amin(-1)
        gap = torch.where(torch.isfinite(gap), gap, torch.ones_like(gap))       # one value in the group
        for from_zero in (True, False):                # a grid through zero first: its lo is exact
            # the step: the smallest gap, else a fraction of it (through zero, down to 1/64: three values of a
            # Q6_K sub-block can be 28 and 29 steps apart; off zero, where the fit is looser, 1/16)
            for k in range(1, 65 if from_zero else 17):
                keep = todo[rows]
                if not keep.any():
                    break
                a = gap[keep] / k
                if from_zero:   # the step as the largest value's n-th: a difference of two values is rounded
                    a = amax[rows[keep]] / (amax[rows[keep]] / a).round().clamp(min=1)   # ~1000x coarser
                attempt(rows[keep], a, from_zero)
    if todo.any():
        return None
    if bits == 8:
        _coarsen_through_zero(w, scale, zero, amax, attempt)
    groups = in_f // group
    scale, lo, zero = scale.view(out_f, groups), lo.view(out_f, groups), zero.view(out_f, groups)
    w = w.view(out_f, groups, group)
    lo = torch.where(zero, -half * scale, lo)
    q = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, levels).to(torch.int32)
    return q.view(out_f, in_f), scale, lo


def _coarsen_through_zero(w, scale, zero, amax, attempt) -> None:
    """A group that block_grid put on a grid off zero may be whole steps from zero too, with a step some multiple
    of the one found (a Q6_K sub-block 51 steps wide lands on range / 255 = a fifth of its step, 140 fifths
    below zero): the greatest common divisor of its values in the found steps gives that step, and `attempt`
    keeps it where it fits (so the W8A8 kernel can store the tensor with no minimum)."""
    off = (~zero).nonzero().squeeze(1)
    if not len(off):
        return
    st = w[off] / scale[off, None]
    n = st.round()
    whole = (st - n).abs().amax(-1) <= 1e-3
    off, n = off[whole], n[whole].abs().to(torch.int64)
    if not len(off):
        return
    g = n[:, 0]
    for j in range(1, n.shape[1]):
        g = torch.gcd(g, n[:, j])
    a = scale[off].abs() * g.clamp(min=1)
    attempt(off, amax[off] / (amax[off] / a).round().clamp(min=1), True)


def int4_grid(weight: torch.Tensor, group: int = INT4_GROUP, tolerance: float = 0.01):
    """(q [out, in] int32 in 0..15, scale [out, groups], lo [out, groups]) with weight ~= q * scale + lo per
    group of `group` inputs, or None when some weight lies off that grid by more than `tolerance` steps.
    An infinite tolerance asks for the nearest such grid (lo the least value, scale a 15th of the range). (A grid
    through zero, as Q4_0's, would save the minimum's half bit a weight in the output head's ranking pass, but
    it ranks worse: on Gemma 3 270M Q4_K_M's 262k-token head, teacher-forced through the decode formats, the mean
    KL against fp32 went from 0.011 to 0.018 nats.)"""
    if tolerance != float("inf"):
        return block_grid(weight, 4, group, tolerance)
    out_f, in_f = weight.shape
    if in_f % group or out_f % 16:
        return None
    w = weight.float().view(out_f, in_f // group, group)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)                                       # [out, groups]
    scale = ((hi - lo) / 15.0).clamp(min=1e-12)
    q = torch.round((w - lo[..., None]) / scale[..., None])
    return q.clamp(0, 15).to(torch.int32).view(out_f, in_f), scale, lo


def split_nibbles(grid):
    """An 8-bit grid (block_grid(w, 8)) as a 4-bit grid of twice the inputs, [low nibbles | high nibbles]:
    q = 16 h + l, so w = scale*l + lo + (16 scale)*h exactly; x @ w.T = [x, x] @ w2.T (the W4A8 kernel sums both
    halves in one float32 accumulator per row)."""
    q, scale, lo = grid
    return torch.cat([q & 15, q >> 4], 1), torch.cat([scale, 16 * scale], 1), torch.cat([lo, torch.zeros_like(lo)], 1)


class Int4Linear:
    def __init__(self, grid: tuple[torch.Tensor, torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None,
                 group: int = INT4_GROUP):
        q, scale, lo = grid                                                       # from int4_grid()
        out_f, in_f = q.shape
        self.packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)   # [out, in/2] uint8
        # torch's int4 matmul computes w = (q - 8) * scale + zero; ours is w = q * scale + lo
        self.scales_zeros = torch.stack([scale, lo + 8 * scale], dim=-1).transpose(0, 1).contiguous().to(
            torch.bfloat16)                                                         # [groups, out, 2]
        self.group = group
        self.bias = None if bias is None else bias.to(torch.bfloat16)
        self.out_features, self.in_features = out_f, in_f
        self.dtype = torch.bfloat16

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        y = torch._weight_int4pack_mm_for_cpu(x, self.packed, self.group, self.scales_zeros)
        return _into(y if self.bias is None else y + self.bias, out)

    @property
    def nbytes(self) -> int:
        return self.packed.numel() + 2 * self.scales_zeros.numel()


class W4A8Linear:
    """4-bit weights x activations in `digits` int8 digits (kernels/w4a8_cpu.py); bfloat16 in and out.
    `repeat` 2: the grid is an 8-bit weight's split_nibbles(), over the input twice."""

    def __init__(self, grid: tuple[torch.Tensor, torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None,
                 digits: int = 2, repeat: int = 1):
        q, scale, lo = grid                                                       # from int4_grid()
        self.digits, self.repeat = digits, repeat
        self.weights = w4a8_cpu.pack(q, scale, lo)
        self._gemm = w4a8_cpu.gemm_call()
        self._ptrs = tuple(t.data_ptr() for t in self.weights[:3])
        self.bias = None if bias is None else bias.to(torch.bfloat16)
        self.out_features, self.in_features = q.shape[0], q.shape[1] // repeat
        self.dtype = torch.bfloat16

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        # x [T, in] bf16 -> [T, out] bf16; the weights' shapes were checked once, in pack(); the kernel writes
        # rows out_features apart, so a given `out` must be contiguous (checked: a wrong one would be overrun)
        x = x.contiguous() if self.repeat == 1 else x.repeat(1, self.repeat)
        y = _bf16_out(x.shape[0], self.out_features, out)
        qw, wd, wm = self._ptrs
        if x.shape[0] and self._gemm(qw, wd, wm, x.data_ptr(), y.data_ptr(), x.shape[0], self.out_features,
                                     self.in_features * self.repeat, int(self.weights.sym), self.digits,
                                     torch.get_num_threads()) != 0:
            raise MemoryError(f"w4a8 kernel: out of memory for {x.shape[0]} rows")
        return y if self.bias is None else y.add_(self.bias)

    @property
    def nbytes(self) -> int:
        return self.weights.nbytes


def _bf16_out(rows: int, features: int, out: torch.Tensor | None) -> torch.Tensor:
    """The [rows, features] bfloat16 buffer a kernel writes (rows `features` apart): `out`, checked, or a new one;
    a wrong `out` would be overrun, so it is refused."""
    if out is None:
        return torch.empty(rows, features, dtype=torch.bfloat16)
    if out.shape != (rows, features) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bfloat16 [{rows}, {features}] tensor, got {out.dtype} "
                         f"{tuple(out.shape)}")
    return out


class W8A8Linear:
    """8-bit block weights (block_grid(w, 8, group), group 16 or 32: each block's own integers, scale and minimum)
    x activations in `digits` int8 digits (kernels/w8a8_cpu.py, quantized as W4A8Linear's are); bfloat16 in and
    out."""

    def __init__(self, grid: tuple[torch.Tensor, torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None,
                 digits: int = 2):
        q, scale, lo = grid
        self.digits, self.group = digits, q.shape[1] // scale.shape[1]
        self.weights = w8a8_cpu.pack(q, scale, lo, self.group)
        self._gemm = w8a8_cpu.gemm_call()
        self._ptrs = tuple(t.data_ptr() for t in self.weights[:3])
        self.bias = None if bias is None else bias.to(torch.bfloat16)
        self.out_features, self.in_features = q.shape
        self.dtype = torch.bfloat16

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        x = x.contiguous()
        y = _bf16_out(x.shape[0], self.out_features, out)
        qw, wd, wm = self._ptrs
        w = self.weights
        if x.shape[0] and self._gemm(qw, wd, wm, x.data_ptr(), y.data_ptr(), x.shape[0], self.out_features,
                                     self.in_features, self.group, w.bits, w.scales, int(w.sym), self.digits,
                                     torch.get_num_threads()) != 0:
            raise MemoryError(f"w8a8 kernel: out of memory for {x.shape[0]} rows")
        return y if self.bias is None else y.add_(self.bias)

    @property
    def nbytes(self) -> int:
        return self.weights.nbytes


def eight_bit_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str) -> Linear | None:
    """`weight` on an 8-bit block grid (GGUF Q8_0, Q5_0, Q5_1, Q5_K per 32; Q6_K, Q3_K per 16) as a kernel
    format `fmt`, with its exact values; None when it lies on no such grid. The W8A8 kernel where it is
    built with VNNI (one dot product per value; its most compact exact layout: Q5_0 5.5 bits a weight, Q8_0 8.5,
    Q6_K 6.5625 read from a file's blocks, 10 recovered from its values); else, for blocks of 32, the W4A8 kernel
    over the grid's low and high nibbles (split_nibbles: 10 bits a weight, twice the dot products)."""
    vnni = registry.use("w8a8_cpu")     # the kernel's VNNI build (registry: used on that path only)
    for group in (32, 16) if vnni else (32,):
        if (grid := block_grid(weight, 8, group)) is not None:
            if vnni:
                return W8A8Linear(grid, bias, KERNEL_DIGITS[fmt])
            return W4A8Linear(split_nibbles(grid), bias, KERNEL_DIGITS[fmt], repeat=2)
    return None


def _into(y: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """`y`, or `out` holding it (for formats whose op has no output argument)."""
    if out is None:
        return y
    out.copy_(y)
    return out


def four_bit_linear(grid, bias: torch.Tensor | None, fmt: str) -> Linear:
    """A 4-bit grid (int4_grid, whose shapes both kernels take) as `fmt` (a FOUR_BIT_FORMATS name)."""
    return W4A8Linear(grid, bias, KERNEL_DIGITS[fmt]) if fmt in KERNEL_DIGITS else Int4Linear(grid, bias)


class SizedLinear:
    """Two formats of one weight (same activation dtype): `small` for decode rows (few per pass, bound by reading
    the weights), `large` for prefill rows (many, bound by arithmetic).

    The choice is per row by phase, never by the size of the pass: a request's tokens then go through the same
    formats whatever else shares its batch, so greedy outputs do not depend on what runs beside them.
    `decode_from`: rows [decode_from:] are decode rows, the rows before it prefill; None: all prefill."""

    def __init__(self, small: Linear, large: Linear):
        if small.dtype != large.dtype:
            raise ValueError(f"SizedLinear formats disagree on activation dtype: {small.dtype} vs {large.dtype}")
        self.small, self.large = small, large
        self.in_features, self.out_features, self.dtype = small.in_features, small.out_features, small.dtype

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        if decode_from is None or decode_from >= x.shape[0]:
            return self.large(x, out=out)
        if decode_from <= 0:
            return self.small(x, out=out)
        if out is None:
            return torch.cat([self.large(x[:decode_from]), self.small(x[decode_from:])])
        self.large(x[:decode_from], out=out[:decode_from])
        self.small(x[decode_from:], out=out[decode_from:])
        return out

    @property
    def nbytes(self) -> int:
        return self.small.nbytes + self.large.nbytes


class StackedLinear:
    """Projections of one input stacked by output columns (q | k | v), each in its own layer: weights of
    different block formats (a Q4_K_M file's Q4_K q and k beside its Q6_K v) each keep their own kernel format,
    where one layer would have to widen all of them to the widest one's."""

    def __init__(self, parts: list):
        self.parts = parts
        self.in_features, self.dtype = parts[0].in_features, parts[0].dtype
        if any(p.in_features != self.in_features or p.dtype != self.dtype for p in parts):
            raise ValueError("StackedLinear parts disagree on their input size or activation dtype")
        self.out_features = sum(p.out_features for p in parts)

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        ys = [p(x, decode_from) for p in self.parts]
        if out is None:
            return torch.cat(ys, dim=-1)
        return torch.cat(ys, dim=-1, out=out)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


class PermutedInput:
    """A layer whose weight's inputs were reordered (a GPTQ act-order checkpoint's columns sorted by group, so a
    block's inputs share a scale): x [T, in] is read in that order, x[:, perm], before `inner`."""

    def __init__(self, inner: Linear, perm: torch.Tensor):
        self.inner, self.perm = inner, perm.to(torch.long)
        self.in_features, self.out_features, self.dtype = inner.in_features, inner.out_features, inner.dtype

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        return self.inner(x[:, self.perm], decode_from, out=out)

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes + self.perm.numel() * 8


class RefinedHead:
    """The output head in a reduced format, made exact where it matters: the approximate logits pick each
    row's `top_k` candidates, whose logits are then recomputed in float32 from the float32 weights.

    Reduced formats round their outputs to bfloat16 (a logit near 20 moves in steps of 0.125), which flips
    near-ties between the leading tokens; the exact top-k keeps argmax and the head of the distribution as
    float32 has them, for the cost of reading top_k weight rows per row. x: [T, H] float32 -> [T, V] float32.
    top_k defaults to 64, or V / 1024 for larger vocabularies, whose tail past the exact candidates holds more of
    the distribution: on Gemma 3 270M (262,144 tokens, teacher-forced through the decode formats) the mean KL
    against fp32 is 0.0114 nats with 64 candidates, 0.0052 with 256, 0.0021 with 1024 (top-1 99.1% in each)."""

    def __init__(self, approx: Linear, weight, top_k: int | None = None):
        top_k = max(64, weight.shape[0] // 1024) if top_k is None else top_k
        # weight [V, H] float32, or a GridMatrix whose rows are read (exactly) as the candidates need them
        weight = weight.float().contiguous() if isinstance(weight, torch.Tensor) else weight
        self.approx, self.weight, self.top_k = approx, weight, top_k
        self.in_features, self.out_features, self.dtype = approx.in_features, approx.out_features, torch.float32
        # on the CPU, bf16 approximate logits are refined by one numba kernel (kernels/head_refine_cpu.py: ties at
        # the k-th value go to the lowest ids), else by torch's ops below; the choice is made here, once
        self._kernel = registry.use("head_refine_cpu") and self.weight.device.type == "cpu" \
            and approx.dtype == torch.bfloat16

    def __call__(self, x: torch.Tensor, decode_from: int | None = None) -> torch.Tensor:
        x = x.float().contiguous()
        approx = self.approx(x.to(self.approx.dtype), decode_from)                 # [T, V]
        k = min(self.top_k, approx.shape[-1])
        if self._kernel:
            return head_refine_cpu.refine_head(approx, k, self.weight, x, torch.empty(approx.shape))
        logits = approx.float()
        cand = logits.topk(k, dim=-1).indices                                        # [T, k]
        # an elementwise product and a sum per row, not bmm: a row's logits must not depend on how many rows the
        # pass has (speculative verification computes several rows of one request where decoding computes one)
        exact = (self.weight[cand] * x[:, None, :]).sum(-1)                         # [T, k]
        return logits.scatter_(1, cand, exact)

    @property
    def nbytes(self) -> int:
        w = self.weight
        return self.approx.nbytes + (w.numel() * 4 if isinstance(w, torch.Tensor) else w.nbytes)


def make_head(weight, small_fmt: str, large_fmt: str, grid=None) -> Linear:
    """The output head [V, H] for a plan. fp32 stays exact. Reduced formats become a RefinedHead, whose
    approximate pass may then be lossy: with int4 for small passes the head goes to 4 bits whatever its source
    (it only has to rank the candidates; their logits come out in float32), which halves the bytes the biggest
    matrix costs per decode step. Measured on the fidelity corpus: top-1 unchanged, mean KL 0.0046 nats.
    `weight`: a float tensor, or a GridMatrix (grid_matrix.py: the file's grid, read in slices and refined row
    by row, never held in float32); `grid`: the weight's block grid where the file gives it
    (make_linear_from_grid)."""
    dense = (lambda: weight) if isinstance(weight, torch.Tensor) else (lambda: torch.cat([r for _, r in weight.chunks(16384)]))
    if small_fmt == "fp32":
        return make_linear(dense(), None, "fp32")
    if small_fmt in FOUR_BIT_FORMATS:
        grid4 = int4_grid(weight, tolerance=float("inf")) if isinstance(weight, torch.Tensor) else \
            _int4_grid_by_rows(weight)
        small = four_bit_linear(grid4, None, RANKING_FORMAT.get(small_fmt, small_fmt)) if grid4 is not None \
            else make_linear(dense(), None, "int8")
        if small_fmt == large_fmt and not isinstance(weight, torch.Tensor):
            return RefinedHead(small, weight)   # prefill rows ranked by the same pass: no second copy
        large = make_linear(dense(), None, large_fmt) if grid is None else \
            make_linear_from_grid(grid, dense, None, large_fmt)
        return RefinedHead(SizedLinear(small, large), weight)
    large = make_linear(dense(), None, large_fmt) if grid is None else \
        make_linear_from_grid(grid, dense, None, large_fmt)
    if small_fmt == large_fmt:
        return RefinedHead(large, weight)
    return RefinedHead(SizedLinear(make_linear(dense(), None, small_fmt), large), weight)


def _int4_grid_by_rows(weight, rows: int = 16384):
    """int4_grid(tolerance=inf) of a GridMatrix, slice by slice (q as uint8): the float32 matrix never exists."""
    parts = [int4_grid(chunk, tolerance=float("inf")) for _, chunk in weight.chunks(rows)]
    if any(p is None for p in parts):
        return None
    return torch.cat([p[0].to(torch.uint8) for p in parts]), torch.cat([p[1] for p in parts]), \
        torch.cat([p[2] for p in parts])


def make_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str) -> Linear:
    """weight [out, in] (any float dtype) in format `fmt`."""
    if fmt == "fp32":
        return DenseLinear(weight.float(), None if bias is None else bias.float())
    if fmt == "bf16":
        return DenseLinear(weight.to(torch.bfloat16), None if bias is None else bias.to(torch.bfloat16))
    if fmt == "int8":
        return Int8Linear(weight, bias)
    if fmt in FOUR_BIT_FORMATS:
        if fmt in KERNEL_DIGITS and (why := registry.status("w4a8_cpu").why) is not None:
            raise ValueError(f"weights {fmt!r} need the w4a8 CPU kernel, which is unavailable here: {why}")
        grid = block_grid(weight, 4)
        if grid is not None:
            return four_bit_linear(grid, bias, fmt)
        if fmt in KERNEL_DIGITS and (layer := eight_bit_linear(weight, bias, fmt)) is not None:   # Q8_0, Q6_K...
            return layer
        return Int8Linear(weight, bias)
    raise ValueError(f"unknown weight format {fmt!r}; choose one of {WEIGHT_FORMATS}")


def make_linear_from_grid(grid, dense: Callable[[], torch.Tensor], bias: torch.Tensor | None, fmt: str) -> Linear:
    """`fmt`'s layer of a weight whose block grid is known, (q, scale, lo, bits) as runtime/gguf_blocks.py reads
    a file's blocks: the same layer make_linear builds from the weight's values, without searching for the grid.
    `dense()` gives the float weight, for the formats that take it (read only then)."""
    q, scale, lo, bits = grid
    if fmt in FOUR_BIT_FORMATS:
        if fmt in KERNEL_DIGITS and (why := registry.status("w4a8_cpu").why) is not None:
            raise ValueError(f"weights {fmt!r} need the w4a8 CPU kernel, which is unavailable here: {why}")
        if bits == 4:
            return four_bit_linear((q, scale, lo), bias, fmt)
        if fmt in KERNEL_DIGITS:                        # as eight_bit_linear: W8A8 with VNNI, else nibbles of 32
            if registry.use("w8a8_cpu"):
                return W8A8Linear((q, scale, lo), bias, KERNEL_DIGITS[fmt])
            if q.shape[1] // scale.shape[1] == 32:
                return W4A8Linear(split_nibbles((q, scale, lo)), bias, KERNEL_DIGITS[fmt], repeat=2)
    return make_linear(dense(), bias, fmt)


def join_grids(grids: list) -> tuple | None:
    """The grids of weights stacked by rows (q, k, v; gate, up) as one grid, when their bits and block sizes
    agree; None when they do not (StackedLinear keeps each in its own format) or some weight has no grid."""
    if any(g is None for g in grids):
        return None
    if len({(g[3], g[0].shape[1] // g[1].shape[1]) for g in grids}) != 1:
        return None
    if len(grids) == 1:
        return grids[0]
    return (*(torch.cat([g[k] for g in grids]) for k in range(3)), grids[0][3])


def make_sized_linear_from_grid(grid, dense: Callable[[], torch.Tensor], bias: torch.Tensor | None, small_fmt: str,
                                large_fmt: str) -> Linear:
    """make_sized_linear for a weight whose block grid is known (make_linear_from_grid)."""
    if small_fmt == large_fmt:
        return make_linear_from_grid(grid, dense, bias, small_fmt)
    return SizedLinear(make_linear_from_grid(grid, dense, bias, small_fmt),
                       make_linear_from_grid(grid, dense, bias, large_fmt))


def make_sized_linear(weight: torch.Tensor, bias: torch.Tensor | None, small_fmt: str, large_fmt: str) -> Linear:
    """One format when both agree, else a SizedLinear over the two (small: decode rows, large: prefill rows)."""
    if small_fmt == large_fmt:
        return make_linear(weight, bias, small_fmt)
    return SizedLinear(make_linear(weight, bias, small_fmt), make_linear(weight, bias, large_fmt))


def describe(layer) -> str:
    return f"{type(layer).__name__} {str(layer.dtype).removeprefix('torch.')} [{layer.out_features} x " \
           f"{layer.in_features}]" + (f" {layer.digits} digits" if hasattr(layer, "digits") else "")
