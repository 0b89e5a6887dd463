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
          built on the machine; offered only where it builds). Weights off the 4-bit grid, or of shapes the
          4-bit kernels cannot take, become int8 as with int4.
    w4a8  as w4a16 with one int8 digit per activation, as llama.cpp quantizes them: faster, but below the
          fidelity gate on SmolLM2 (96.7% top-1), so offered only by name.

Every layer maps x [T, in] in its activation dtype to [T, out] in the same dtype. `SizedLinear` holds two
formats of one weight and runs decode rows (few per pass, bound by reading weights) in one and prefill rows
(many, bound by arithmetic) in the other, so each phase uses its fastest format.
"""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from sglite.kernels import w4a8_cpu

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


def int4_grid(weight: torch.Tensor, group: int = INT4_GROUP, tolerance: float = 0.01):
    """(q [out, in] int32 in 0..15, scale [out, groups], lo [out, groups]) with weight ~= q * scale + lo per
    group of `group` inputs, or None when some weight lies off that grid by more than `tolerance` steps
    (the weight was not 4-bit to begin with)."""
    out_f, in_f = weight.shape
    if in_f % group or out_f % 16:                   # shapes the packed int4 kernels (torch's, ours) cannot take
        return None
    w = weight.float().view(out_f, in_f // group, group)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)                                       # [out, groups]
    scale = ((hi - lo) / 15.0).clamp(min=1e-12)
    steps = (w - lo[..., None]) / scale[..., None]
    q = torch.round(steps)
    if (steps - q).abs().max() > tolerance:
        return None
    return q.clamp(0, 15).to(torch.int32).view(out_f, in_f), scale, lo


class Int4Linear:
    def __init__(self, grid: tuple[torch.Tensor, torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None,
                 group: int = INT4_GROUP):
        q, scale, lo = grid                                                       # from int4_grid()
        out_f, in_f = q.shape
        self.packed = torch._convert_weight_to_int4pack_for_cpu(q, 1)              # [out, in/2] uint8
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
    """4-bit weights x activations in `digits` int8 digits (kernels/w4a8_cpu.py); bfloat16 in and out."""

    def __init__(self, grid: tuple[torch.Tensor, torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None,
                 digits: int = 2):
        q, scale, lo = grid                                                       # from int4_grid()
        self.digits = digits
        self.weights = w4a8_cpu.pack(q, scale, lo)
        self._gemm = w4a8_cpu.gemm_call()
        self._ptrs = tuple(t.data_ptr() for t in self.weights)
        self.bias = None if bias is None else bias.to(torch.bfloat16)
        self.out_features, self.in_features = q.shape
        self.dtype = torch.bfloat16

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        # x [T, in] bf16 -> [T, out] bf16; the weights' shapes were checked once, in pack(); the kernel writes
        # rows out_features apart, so a given `out` must be contiguous (checked: a wrong one would be overrun)
        x = x.contiguous()
        if out is None:
            y = torch.empty(x.shape[0], self.out_features, dtype=torch.bfloat16)
        elif out.shape != (x.shape[0], self.out_features) or out.dtype != torch.bfloat16 or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous bfloat16 [{x.shape[0]}, {self.out_features}] tensor, got "
                             f"{out.dtype} {tuple(out.shape)}")
        else:
            y = out
        qw, wd, wm = self._ptrs
        if x.shape[0] and self._gemm(qw, wd, wm, x.data_ptr(), y.data_ptr(), x.shape[0], self.out_features,
                                     self.in_features, self.digits, torch.get_num_threads()) != 0:
            raise MemoryError(f"w4a8 kernel: out of memory for {x.shape[0]} rows")
        return y if self.bias is None else y.add_(self.bias)

    @property
    def nbytes(self) -> int:
        return self.weights.nbytes


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


class RefinedHead:
    """The output head in a reduced format, made exact where it matters: the approximate logits pick each
    row's `top_k` candidates, whose logits are then recomputed in float32 from the float32 weights.

    Reduced formats round their outputs to bfloat16 (a logit near 20 moves in steps of 0.125), which flips
    near-ties between the leading tokens; the exact top-k keeps argmax and the head of the distribution as
    float32 has them, for the cost of reading top_k weight rows per row. x: [T, H] float32 -> [T, V] float32."""

    def __init__(self, approx: Linear, weight: torch.Tensor, top_k: int = 64):
        self.approx, self.weight, self.top_k = approx, weight.float(), top_k    # weight [V, H] float32
        self.in_features, self.out_features, self.dtype = approx.in_features, approx.out_features, torch.float32

    def __call__(self, x: torch.Tensor, decode_from: int | None = None) -> torch.Tensor:
        x = x.float()
        logits = self.approx(x.to(self.approx.dtype), decode_from).float()        # [T, V]
        cand = logits.topk(min(self.top_k, logits.shape[-1]), dim=-1).indices      # [T, k]
        # an elementwise product and a sum per row, not bmm: a row's logits must not depend on how many rows the
        # pass has (speculative verification computes several rows of one request where decoding computes one)
        exact = (self.weight[cand] * x[:, None, :]).sum(-1)                         # [T, k]
        return logits.scatter_(1, cand, exact)

    @property
    def nbytes(self) -> int:
        return self.approx.nbytes + self.weight.numel() * 4


def make_head(weight: torch.Tensor, small_fmt: str, large_fmt: str) -> Linear:
    """The output head [V, H] for a plan. fp32 stays exact. Reduced formats become a RefinedHead, whose
    approximate pass may then be lossy: with int4 for small passes the head goes to 4 bits whatever its source
    (it only has to rank the candidates; their logits come out in float32), which halves the bytes the biggest
    matrix costs per decode step. Measured on the fidelity corpus: top-1 unchanged, mean KL 0.0046 nats."""
    if small_fmt == "fp32":
        return make_linear(weight, None, "fp32")
    large = make_linear(weight, None, large_fmt)
    if small_fmt in FOUR_BIT_FORMATS:
        grid = int4_grid(weight, tolerance=float("inf"))
        small = four_bit_linear(grid, None, RANKING_FORMAT.get(small_fmt, small_fmt)) if grid is not None \
            else make_linear(weight, None, "int8")
        return RefinedHead(SizedLinear(small, large), weight)
    if small_fmt == large_fmt:
        return RefinedHead(large, weight)
    return RefinedHead(SizedLinear(make_linear(weight, None, small_fmt), large), weight)


def make_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str) -> Linear:
    """weight [out, in] (any float dtype) in format `fmt`."""
    if fmt == "fp32":
        return DenseLinear(weight.float(), None if bias is None else bias.float())
    if fmt == "bf16":
        return DenseLinear(weight.to(torch.bfloat16), None if bias is None else bias.to(torch.bfloat16))
    if fmt == "int8":
        return Int8Linear(weight, bias)
    if fmt in FOUR_BIT_FORMATS:
        if fmt in KERNEL_DIGITS and (why := w4a8_cpu.unavailable_reason()) is not None:
            raise ValueError(f"weights {fmt!r} need the w4a8 CPU kernel, which is unavailable here: {why}")
        grid = int4_grid(weight)
        return Int8Linear(weight, bias) if grid is None else four_bit_linear(grid, bias, fmt)
    raise ValueError(f"unknown weight format {fmt!r}; choose one of {WEIGHT_FORMATS}")


def make_sized_linear(weight: torch.Tensor, bias: torch.Tensor | None, small_fmt: str, large_fmt: str) -> Linear:
    """One format when both agree, else a SizedLinear over the two (small: decode rows, large: prefill rows)."""
    if small_fmt == large_fmt:
        return make_linear(weight, bias, small_fmt)
    return SizedLinear(make_linear(weight, bias, small_fmt), make_linear(weight, bias, large_fmt))


PROBE_ROWS = tuple(range(1, 17)) + (20, 24, 31, 33, 40)   # row counts compared against one call of PROBE_TOTAL
PROBE_TOTAL = 64
PREFILL_MIN_ROWS = 16   # prefill-only layers are called with at least this many rows under batch invariance
_probed: dict[tuple, int | None] = {}   # (class, dtype, out, in, digits) -> min_independent_rows


def leaf_roles(layer) -> list[tuple["Linear", bool]]:
    """(plain layer, whether it computes decode rows) for each plain layer a projection calls: a SizedLinear's
    large layer computes prefill rows only; a RefinedHead's exact part is a per-row product and sum."""
    if isinstance(layer, SizedLinear):
        return [(x, True) for x, _ in leaf_roles(layer.small)] + [(x, False) for x, _ in leaf_roles(layer.large)]
    if isinstance(layer, RefinedHead):
        return leaf_roles(layer.approx)
    if isinstance(layer, PaddedRows):
        return leaf_roles(layer.inner)
    return [(layer, True)]


def min_independent_rows(layer) -> int | None:
    """The fewest rows a call of `layer` must have for each row to come out the same bits whatever other rows
    share the call (1: any call), or None when no count up to 16 does. Our W4A8 kernel: 1, by construction (a
    row's arithmetic is the same in any group of rows; tests/kernels). torch's kernels: measured, once per
    process for each class, dtype, shape and digits, on rows 1-16 (and a few more) against one 64-row call. On
    an AVX-512 Zen 4 with torch 2.13 its float32 matmul took other paths below 12 rows; its bfloat16 one once gave
    a single row of a [576 x 1536] weight other bits and in later processes did not, so a probe that passes is
    evidence, not proof (the engine pads prefill-only layers anyway: PREFILL_MIN_ROWS)."""
    if isinstance(layer, W4A8Linear):
        return 1
    key = (type(layer).__name__, layer.dtype, layer.out_features, layer.in_features, getattr(layer, "digits", 0))
    if key not in _probed:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(PROBE_TOTAL, layer.in_features, generator=g).to(layer.dtype)
        full = layer(x)
        bad = [m for m in PROBE_ROWS
               if not all(torch.equal(layer(x[a:a + m]), full[a:a + m]) for a in (0, PROBE_TOTAL - m))]
        _probed[key] = 1 if not bad else max(bad) + 1 if max(bad) < 16 else None
    return _probed[key]


class PaddedRows:
    """`inner` called with at least `min_rows` rows (zero rows added, their results dropped): where a kernel
    computes a row alike in every call of that many rows or more, and otherwise below (min_independent_rows)."""

    def __init__(self, inner: "Linear", min_rows: int):
        self.inner, self.min_rows = inner, min_rows
        self.in_features, self.out_features, self.dtype = inner.in_features, inner.out_features, inner.dtype

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        n = x.shape[0]
        if n >= self.min_rows or n == 0:
            return self.inner(x, decode_from, out=out)
        padded = torch.cat([x, x.new_zeros(self.min_rows - n, x.shape[1])])
        return _into(self.inner(padded, decode_from)[:n], out)

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes


def pad_prefill_rows(layer, rows: dict[int, int]) -> None:
    """Wraps, in place, each prefill-only plain layer (a SizedLinear's large one) of projection `layer` whose id
    is in `rows` in PaddedRows of that many rows (once: a layer already wrapped is left as it is)."""
    if isinstance(layer, RefinedHead):
        pad_prefill_rows(layer.approx, rows)
    elif isinstance(layer, SizedLinear) and not isinstance(layer.large, PaddedRows) and id(layer.large) in rows:
        layer.large = PaddedRows(layer.large, rows[id(layer.large)])


def describe(layer) -> str:
    return f"{type(layer).__name__} {str(layer.dtype).removeprefix('torch.')} [{layer.out_features} x " \
           f"{layer.in_features}]" + (f" {layer.digits} digits" if hasattr(layer, "digits") else "")
