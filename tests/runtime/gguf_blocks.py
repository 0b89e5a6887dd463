"""Tensors in GGUF's real block layouts, for every type llama-quantize's common presets write: quantized by the
`gguf` package where it quantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), else built block by block from
the documented layouts (ggml-common.h): random bits for the quantized values, the sub-block scales and the high
bits, and moderate float16 values written into each block's d/dmin fields (random bits there could be NaN)."""
from __future__ import annotations

import numpy as np

QUANTIZED_BY_GGUF = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
# byte offsets of each block's float16 fields: d (and dmin) (ggml-common.h)
BUILT_BY_LAYOUT = {
    "Q2_K": (80, 82),     # scales[16], qs[64], d, dmin: 84 bytes per 256 values
    "Q3_K": (108,),       # hmask[32], qs[64], scales[12], d: 110
    "Q4_K": (0, 2),       # d, dmin, scales[12], qs[128]: 144
    "Q5_K": (0, 2),       # d, dmin, scales[12], qh[32], qs[128]: 176
    "Q6_K": (208,),       # ql[128], qh[64], scales[16] (int8), d: 210
    "IQ4_NL": (0,),       # d, qs[16]: 18 per 32 values
    "IQ4_XS": (0,),       # d, scales_h (uint16), scales_l[4], qs[128]: 136
}
ALL_TYPES = QUANTIZED_BY_GGUF + tuple(BUILT_BY_LAYOUT)


def block_tensor(kind: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """The raw GGUF data of a [rows, cols] tensor of type `kind` (uint8 [rows, bytes per row], or the float
    array for float types), as GGUFWriter.add_tensor(raw_dtype=...) takes it."""
    import gguf
    from gguf.constants import GGMLQuantizationType as T

    rng = np.random.default_rng(seed)
    if kind in QUANTIZED_BY_GGUF:
        w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        w[:, ::7] *= 4      # some larger weights, so blocks differ in range
        return gguf.quants.quantize(w, T[kind])
    block, size = gguf.GGML_QUANT_SIZES[T[kind]]
    assert cols % block == 0, f"{kind} needs columns in multiples of {block}"
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for off in BUILT_BY_LAYOUT[kind]:
        scale = rng.uniform(0.0005, 0.004, (rows, cols // block)).astype(np.float16)
        raw[..., off:off + 2] = scale.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, cols // block * size)


def dequantized(kind: str, data: np.ndarray) -> np.ndarray:
    """gguf.quants.dequantize: the reference values of a tensor."""
    import gguf
    from gguf.constants import GGMLQuantizationType as T

    return np.asarray(gguf.quants.dequantize(data, T[kind]), dtype=np.float32)
