"""Hugging Face checkpoints quantized by AWQ or GPTQ, read into the 4-bit block grids our kernels run, never
widened to float32 at rest.

    spec = QuantSpec.from_config(cfg["quantization_config"], source)   # refuses what it cannot read, by name
    q, scale, lo, perm = unpack_gptq(qweight, qzeros, scales, g_idx, spec)   # or unpack_awq(...)
    # weight[:, perm] == q * scale + lo per block of 32 inputs (perm None: the identity)

The formats, as their quantizers write them (4 bits, group size g, scales float16 [groups, out]):
- GPTQ (`quant_method: gptq`, checkpoint_format gptq): qweight int32 [in / 8, out], eight values along the input
  per int32 (value i of row r in bits 4 (i % 8) of qweight[i // 8]); qzeros int32 [groups, out / 8], eight along
  the output, stored as zero - 1; g_idx int32 [in], each input's group (i // g, or any order with act-order,
  desc_act); w[o, i] = scales[g_idx[i], o] * (q[i, o] - zero[g_idx[i], o]). gptq_v2 stores the zeros as they are.
- AWQ (`quant_method: awq`, version gemm): qweight int32 [in, out / 8] and qzeros int32 [groups, out / 8], eight
  values along the output per int32 in the order 0 2 4 6 1 3 5 7 (nibble k holds column AWQ_ORDER[k]);
  w[o, i] = scales[i // g, o] * (q[i, o] - zero[i // g, o]).
A group of g inputs is g / 32 of our blocks with the same step and minimum: scale = s, lo = -zero * s. With
act-order the inputs are sorted by group (`perm`) so every block's inputs share one; the layer then reads its
input in that order (linear.PermutedInput). Values are exact in float32 ((q - z) * s: 4 bits times float16's
11); the W4A8 kernel stores the minimum in float16, as it does for GGUF's Q4_K."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .config import UnsupportedModelError

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)     # AWQ GEMM: nibble k of an int32 holds output column AWQ_ORDER[k]
BLOCK = 32                               # our kernels' block of inputs


@dataclass(frozen=True)
class QuantSpec:
    method: str            # "gptq" | "awq"
    group: int             # inputs per scale (a multiple of 32; -1 in the config: all inputs)
    act_order: bool        # GPTQ desc_act: inputs in any group order (g_idx)
    zeros_minus_one: bool  # GPTQ's v1 checkpoints store zero - 1

    @classmethod
    def from_config(cls, q: dict[str, Any], source: str) -> "QuantSpec":
        method = q.get("quant_method", "?")
        where = f"{source}: quantization_config ({method!r})"
        if method not in ("gptq", "awq"):
            raise UnsupportedModelError(f"{where} is not a format sglite reads; it reads AWQ (GEMM) and GPTQ "
                                        "4-bit checkpoints, unquantized safetensors and GGUF files")
        bits = q.get("bits", q.get("w_bit"))
        if bits != 4:
            raise UnsupportedModelError(f"{where}: bits={bits!r}; sglite reads 4-bit AWQ/GPTQ weights")
        group = q.get("group_size", q.get("q_group_size"))
        if not isinstance(group, int) or not (group == -1 or (group > 0 and group % BLOCK == 0)):
            raise UnsupportedModelError(f"{where}: group_size={group!r}; sglite reads groups of a multiple of "
                                        f"{BLOCK} inputs (or -1, one group)")
        if method == "awq":
            version = str(q.get("version", "gemm")).lower()
            if version != "gemm":
                raise UnsupportedModelError(f"{where}: version={version!r}; sglite reads AWQ's GEMM packing")
            if q.get("zero_point", True) is not True:
                raise UnsupportedModelError(f"{where}: zero_point=False is not supported")
            return cls("awq", group, False, False)
        fmt = q.get("checkpoint_format", "gptq")
        if fmt not in ("gptq", "gptq_v2"):
            raise UnsupportedModelError(f"{where}: checkpoint_format={fmt!r}; sglite reads 'gptq' and 'gptq_v2'")
        return cls("gptq", group, bool(q.get("desc_act", False)), fmt == "gptq")


def _nibbles(packed: torch.Tensor, axis: int) -> torch.Tensor:
    """int32 tensor -> the eight 4-bit values of each int32 (value k in bits 4k) spread along `axis`, uint8."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    p = packed.to(torch.int32).unsqueeze(-1)                                    # [..., 1]
    v = ((p >> shifts) & 15).to(torch.uint8)                                    # [..., 8]
    if axis == 0:                                                               # [rows, cols, 8] -> [rows * 8, cols]
        return v.permute(0, 2, 1).reshape(packed.shape[0] * 8, packed.shape[1])
    return v.reshape(packed.shape[0], packed.shape[1] * 8)                      # along the columns


def _grid(q_in_out: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group_of: torch.Tensor, group: int):
    """(q [out, in] uint8, scale, lo [out, in / 32] float32, perm) from q [in, out], zeros/scales [groups, out] and
    each input's group."""
    n_in = q_in_out.shape[0]
    perm = None
    if not torch.equal(group_of, torch.arange(n_in) // group):
        perm = torch.argsort(group_of, stable=True)
        group_of = group_of[perm]
        q_in_out = q_in_out[perm]
        if not torch.equal(group_of, torch.arange(n_in) // group):
            raise UnsupportedModelError("g_idx does not give every group exactly group_size inputs")
    blocks = group_of[::BLOCK]                                                   # [in / 32]: each block's group
    s = scales.float()[blocks].T.contiguous()                                    # [out, in / 32]
    z = zeros.float()[blocks].T
    return q_in_out.T.contiguous(), s, (-z * s).contiguous(), perm


def unpack_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor | None,
                spec: QuantSpec):
    """A GPTQ layer's (q, scale, lo, perm); see the module docstring."""
    q = _nibbles(qweight, axis=0)                                                # [in, out]
    zeros = _nibbles(qzeros, axis=1).to(torch.int16) + (1 if spec.zeros_minus_one else 0)   # [groups, out]
    n_in = q.shape[0]
    group = n_in if spec.group == -1 else spec.group
    group_of = g_idx.to(torch.long) if g_idx is not None else torch.arange(n_in) // group
    if group_of.shape != (n_in,) or int(group_of.max()) >= scales.shape[0]:
        raise UnsupportedModelError(f"g_idx of shape {tuple(group_of.shape)} does not index the {scales.shape[0]} "
                                    f"groups of {n_in} inputs")
    return _grid(q, zeros, scales, group_of, group)


def unpack_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, spec: QuantSpec):
    """An AWQ GEMM layer's (q, scale, lo, None); see the module docstring."""
    order = torch.tensor(AWQ_ORDER)
    inverse = torch.argsort(order)                                               # column j <- nibble inverse[j]

    def columns(packed: torch.Tensor) -> torch.Tensor:
        v = _nibbles(packed, axis=1).view(packed.shape[0], -1, 8)
        return v[:, :, inverse].reshape(packed.shape[0], -1)

    q, zeros = columns(qweight), columns(qzeros).to(torch.int16)                 # [in, out], [groups, out]
    n_in = q.shape[0]
    group = n_in if spec.group == -1 else spec.group
    return _grid(q, zeros, scales, torch.arange(n_in) // group, group)


def dequantize(grid) -> torch.Tensor:
    """The float32 weight [out, in] of a (q, scale, lo, perm) grid, in the checkpoint's input order."""
    q, scale, lo, perm = grid
    out_f, in_f = q.shape
    w = (q.view(out_f, -1, BLOCK).float() * scale[..., None] + lo[..., None]).view(out_f, in_f)
    if perm is None:
        return w
    back = torch.empty_like(w)
    back[:, perm] = w
    return back
