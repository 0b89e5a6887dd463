"""GGUF block formats read straight into integer grids: a tensor's own integers, step and minimum per block,
from its bytes, with no float32 copy and no search.

    grid = block_grid_from_gguf(raw, "Q4_K", (out, in))   # (q [out, in] uint8, scale, lo [out, groups], bits)
    # weight == q * scale + lo per group of in // groups inputs; in float32 exactly as gguf.quants.dequantize
    # computes it when evaluated as it does: q * scale + lo at 4 bits, (q - 128) * scale at 8 (lo = -128 scale)

The grids are the ones runtime/linear.py's kernels take (block_grid's convention): 4 bits per 32 inputs for Q4_K
(scale d * sc, lo -dmin * m per sub-block); 8 bits through zero (lo = -128 * scale) for Q8_0 per 32 and Q6_K
per 16 (Q6_K's q - 32 stored as q + 96). Other types return None: linear.block_grid recovers theirs from the
dequantized values, as before. Shapes: `raw` is the tensor's bytes (uint8, rows of ne0 = `in` values, blocks of
256 or 32 values in order), `shape` (out, in) as torch lays the weight out."""
from __future__ import annotations

import numpy as np
import torch

QK_K = 256
# bytes per block and values per block
BLOCK = {"Q4_K": (144, QK_K), "Q6_K": (210, QK_K), "Q8_0": (34, 32)}


def block_grid_from_gguf(raw: np.ndarray, qtype: str, shape: tuple[int, int]
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int] | None:
    """(q uint8 [out, in], scale float32 [out, groups], lo float32 [out, groups], bits) of a GGUF tensor of type
    `qtype`, or None for a type read another way (module docstring)."""
    if qtype not in BLOCK:
        return None
    out_f, in_f = shape
    nbytes, per = BLOCK[qtype]
    if in_f % per:
        return None
    blocks = np.asarray(raw, dtype=np.uint8).reshape(out_f * (in_f // per), nbytes)
    q, scale, lo, bits = _READERS[qtype](blocks)
    groups = scale.shape[1] * (in_f // per)
    return (torch.from_numpy(q.reshape(out_f, in_f)), torch.from_numpy(scale.reshape(out_f, groups)),
            torch.from_numpy(lo.reshape(out_f, groups)), bits)


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """[B] float32 of the float16 at byte `at` of each block."""
    return blocks[:, at:at + 2].copy().view(np.float16)[:, 0].astype(np.float32)


def _q4_k(blocks: np.ndarray):
    """Q4_K: d, dmin (f16), 12 bytes of eight 6-bit (sc, m) pairs, 128 bytes of 4-bit values: four chunks of 64
    values, a chunk's 32 bytes holding values 0..31 in the low nibbles and 32..63 in the high ones."""
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    s = blocks[:, 4:16]                                                                # [B, 12] uint8
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    qs = blocks[:, 16:144].reshape(-1, 4, 1, 32)                                       # [B, chunk, 1, 32]
    q = np.empty((len(blocks), 4, 2, 32), np.uint8)
    np.bitwise_and(qs[:, :, 0], 0xF, out=q[:, :, 0])
    np.right_shift(qs[:, :, 0], 4, out=q[:, :, 1])
    # as gguf.quants computes the weight: (d * sc) * q - (dmin * m), in float32
    return q.reshape(-1, QK_K), d[:, None] * sc.astype(np.float32), -(dmin[:, None] * m.astype(np.float32)), 4


def _q6_k(blocks: np.ndarray):
    """Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, d (f16); w = d * sc * (q - 32)
    per sub-block of 16. Per half of 128 values: ql[0:32] low / ql[32:64] low / ql[0:32] high / ql[32:64] high
    nibbles are values 0..31 / 32..63 / 64..95 / 96..127, with qh's bit pairs 0-1 / 2-3 / 4-5 / 6-7 on top."""
    ql = blocks[:, 0:128].reshape(-1, 2, 2, 32)                                        # [B, half, lo/hi 32, 32]
    qh = blocks[:, 128:192].reshape(-1, 2, 32)
    sc = blocks[:, 192:208].view(np.int8).astype(np.float32)                           # [B, 16]
    d = _f16(blocks, 208)
    q = np.empty((len(blocks), 2, 4, 32), np.uint8)
    for part in range(4):            # values 32 * part .. of each half: nibble of ql[part % 2], qh bits 2 * part
        nib = ql[:, :, part % 2] & 0xF if part < 2 else ql[:, :, part % 2] >> 4
        np.bitwise_or(nib, ((qh >> (2 * part)) & 3) << 4, out=q[:, :, part])
    q += 96                                                                            # q - 32 + 128: 96..159
    scale = d[:, None] * sc                                                            # [B, 16]
    return q.reshape(-1, QK_K), scale, -128 * scale, 8


def _q8_0(blocks: np.ndarray):
    """Q8_0: d (f16), 32 int8 values; w = d * q."""
    d = _f16(blocks, 0)
    q = (blocks[:, 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return q, d[:, None], -128 * d[:, None], 8


_READERS = {"Q4_K": _q4_k, "Q6_K": _q6_k, "Q8_0": _q8_0}
