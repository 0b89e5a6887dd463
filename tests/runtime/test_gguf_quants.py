"""Every GGUF tensor type llama-quantize's common presets write loads with the file's exact values
(gguf.quants.dequantize is the reference), and the kernel formats compute with them: the 4-bit and 8-bit block
grids recovered from the values reproduce every weight, and the kernels' outputs match the float32 matmul of the
dequantized weights to the rounding of bfloat16 activations and outputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sglite.kernels import w4a8_cpu, w8a8_cpu
from sglite.runtime.gguf_loader import DEQUANTIZABLE, GGUFError, GGUFFile
from sglite.runtime.linear import Int8Linear, W4A8Linear, W8A8Linear, block_grid, make_linear, split_nibbles

from .gguf_blocks import ALL_TYPES, block_tensor, dequantized

H, FF, V = 256, 512, 64
# the grid each type's values lie on: (bits, inputs per block) of the narrowest one. Q2_K/Q3_K/Q6_K mix scales
# per 16; IQ4's levels are a non-uniform table of integers (times d), so they sit on an 8-bit grid of step d.
GRID = {"Q4_0": (4, 32), "Q4_1": (4, 32), "Q4_K": (4, 32), "Q5_0": (8, 32), "Q5_1": (8, 32), "Q8_0": (8, 32),
        "Q5_K": (8, 32), "IQ4_NL": (8, 32), "IQ4_XS": (8, 32), "Q2_K": (8, 16), "Q3_K": (8, 16), "Q6_K": (8, 16)}
# where the recovered scale is a product d*sc that float16 (the 4-bit kernel's storage) does not hold exactly
SCALE_PRODUCTS = ("Q4_K", "Q5_K")
needs_kernel = pytest.mark.skipif(not w4a8_cpu.available(), reason="the w4a8 CPU kernel does not build here")
VNNI = w8a8_cpu.isa() == "avx512_vnni"


def test_the_types_cover_the_presets():
    assert set(ALL_TYPES) == set(DEQUANTIZABLE)


def _write(path, kind: str, extra: dict | None = None):
    """A one-layer qwen2-layout GGUF whose projections are `kind` blocks; the rest float32."""
    import gguf
    from gguf.constants import GGMLQuantizationType as T

    w = gguf.GGUFWriter(str(path), "qwen2")
    for key, value in dict(block_count=1, context_length=256, embedding_length=H, feed_forward_length=FF,
                           head_count=4, head_count_kv=2, rope_freq_base=10000.0, layer_norm_rms_eps=1e-6).items():
        getattr(w, f"add_{key}")(value)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(V)])
    rng = np.random.default_rng(0)
    raw = {}
    for i, (name, (o, n)) in enumerate({"attn_q": (H, H), "attn_k": (H // 2, H), "attn_v": (H // 2, H),
                                        "attn_output": (H, H), "ffn_gate": (FF, H), "ffn_up": (FF, H),
                                        "ffn_down": (H, FF)}.items()):
        raw[f"blk.0.{name}.weight"] = block_tensor(kind, o, n, seed=i)
    for name, data in {**raw, **(extra or {})}.items():
        if data.dtype in (np.float32, np.float16) and kind in ("F32", "F16") and name in raw:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=T[kind] if name in raw else T[name.split("|")[0]])
    w.add_tensor("token_embd.weight", rng.standard_normal((V, H)).astype(np.float32))
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, np.ones(H, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return raw


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_each_type_loads_with_the_files_exact_values(tmp_path, kind):
    raw = _write(tmp_path / f"{kind}.gguf", kind)
    weights = GGUFFile(tmp_path / f"{kind}.gguf").load_weights()
    for name, data in raw.items():
        ref = dequantized(kind, data)
        assert weights[name].shape == ref.shape and np.array_equal(weights[name].numpy(), ref), name


def test_a_type_sglite_cannot_read_is_refused_by_name(tmp_path):
    import gguf
    from gguf.constants import GGMLQuantizationType as T

    path = tmp_path / "iq2.gguf"
    _write(path, "Q8_0")
    f = gguf.GGUFReader(str(path))      # the gguf package's reader: its fields carry their value types
    # swap in a type outside the list (IQ2_XXS: 2.06 bits, from an importance matrix) for one tensor
    blocks = np.zeros((H, H // 256 * gguf.GGML_QUANT_SIZES[T.IQ2_XXS][1]), np.uint8)
    path2 = tmp_path / "iq2b.gguf"
    w = gguf.GGUFWriter(str(path2), "qwen2")
    for field in f.fields.values():
        if field.name.startswith("qwen2.") or field.name.startswith("tokenizer."):
            w.add_key_value(field.name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1
                            else None)
    for t in f.tensors:
        if t.name == "blk.0.attn_q.weight":
            w.add_tensor(t.name, blocks, raw_dtype=T.IQ2_XXS)
        else:
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match=r"'blk.0.attn_q.weight'.* is IQ2_XXS, a GGUF tensor type sglite cannot read"):
        GGUFFile(path2).load_weights()


def _weights(kind: str, rows: int = 64, cols: int = 512, seed: int = 3) -> torch.Tensor:
    return torch.from_numpy(dequantized(kind, block_tensor(kind, rows, cols, seed)).reshape(rows, cols))


@pytest.mark.parametrize("kind", [k for k in ALL_TYPES if k not in ("F32", "F16", "BF16")])
def test_block_grids_reproduce_the_weights(kind):
    """The grid recovered from the values holds every weight: exactly for the types whose scales are the file's
    float16 d (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, and IQ4's d at 8 bits), to float16's rounding of d*sc for Q4_K/Q5_K at 4
    bits, and to float32's rounding (the 8-bit kernel's storage) for the sub-blocks of 16 (Q2_K/Q3_K/Q6_K)."""
    w = _weights(kind)
    bits, group = GRID[kind]
    if bits == 8:
        assert block_grid(w, 4) is None, f"{kind} on a 4-bit grid"
    if group == 16 and kind != "Q3_K":   # (Q3_K's sub-block scales may share a factor: a coarser grid can fit)
        assert block_grid(w, 8, 32) is None, f"{kind} on an 8-bit grid per 32"
    for b in range(bits, 9, 4):
        q, scale, lo = block_grid(w, b, group)
        assert int(q.max()) < (1 << b) and int(q.min()) >= 0
        # the values as the kernel stores them: d and m in float16 (4 bits) or float32 (8 bits, W8A8)
        store = torch.float16 if b == 4 or not VNNI else torch.float32
        s, l = scale.to(store).double(), lo.to(store).double()
        back = (q.double().view(64, -1, group) * s[..., None] + l[..., None]).view(64, -1)
        err = (back - w.double()).abs().max().item()
        if store == torch.float16 and kind in SCALE_PRODUCTS:
            assert err <= w.abs().max().item() * 2 ** -10
        elif store == torch.float32 and (group == 16 or kind in SCALE_PRODUCTS):
            assert err <= w.abs().max().item() * 2 ** -22, f"{kind} {b}-bit grid off by {err}"
        else:
            assert err == 0, f"{kind} {b}-bit grid off by {err}"


@needs_kernel
@pytest.mark.parametrize("fmt", ["w4a16", "w4a8"])
@pytest.mark.parametrize("kind", [k for k in ALL_TYPES if k not in ("F32", "F16", "BF16")])
def test_kernel_formats_compute_with_the_files_values(kind, fmt):
    """The layer make_linear builds for each type, against the float32 matmul of gguf.quants.dequantize's
    values; activations round to bfloat16 (and, in w4a8, to one int8 digit per value) and outputs to bfloat16.
    With VNNI every type but the 4-bit ones runs on the W8A8 kernel; without, the 8-bit grids of 32 run as two
    4-bit halves and the grids of 16 as int8 per channel (lossy)."""
    w = _weights(kind)
    layer = make_linear(w, None, fmt)
    bits, group = GRID[kind]
    digits = {"w4a16": 2, "w4a8": 1}[fmt]
    exact = True
    if bits == 4:
        assert isinstance(layer, W4A8Linear) and layer.repeat == 1
    elif VNNI:
        assert isinstance(layer, W8A8Linear) and layer.digits == digits
        assert layer.group == group or (kind == "Q3_K" and layer.group == 32)
        ref = w8a8_cpu.w8a8_linear_ref(x := _x(w), layer.weights, digits).float()
        assert (layer(x).float() - ref).abs().max().item() <= 2 ** -7 * ref.abs().max().item()
    elif group == 32:
        assert isinstance(layer, W4A8Linear) and layer.repeat == 2
        packed = w4a8_cpu.pack(*split_nibbles(block_grid(w, 8)))
        ref = w4a8_cpu.w4a8_linear_ref(_x(w).repeat(1, 2), packed, digits).float()
        assert (layer(_x(w)).float() - ref).abs().max().item() <= 2 ** -7 * ref.abs().max().item()
    else:
        assert isinstance(layer, Int8Linear)
        exact = False
    x = _x(w)
    ref = x.double() @ w.double().T                              # the file's values, bf16 activations
    y = layer(x).double()
    scale = ref.abs().max().item()
    tol = {"w4a16": 2 ** -8, "w4a8": 2 ** -5}[fmt] if exact else 2 ** -5
    assert (y - ref).abs().max().item() <= tol * scale
    if exact:   # and over all outputs: the activation rounding is the only loss
        rel = ((y - ref).norm() / ref.norm()).item()
        assert rel <= {"w4a16": 0.004, "w4a8": 0.02}[fmt], rel


def _x(w: torch.Tensor) -> torch.Tensor:
    return torch.randn(7, w.shape[1], generator=torch.Generator().manual_seed(0)).bfloat16()


@needs_kernel
@pytest.mark.parametrize("kind", ["Q8_0", "Q5_1", "Q6_K", "IQ4_XS"])
def test_rows_stay_independent_in_the_8_bit_layouts(kind):
    """A row computed alone (M=1) equals the same row inside a call of 37."""
    from sglite.runtime.batch_invariance import min_independent_rows

    layer = make_linear(_weights(kind), None, "w4a16")
    x = torch.randn(37, 512, generator=torch.Generator().manual_seed(1)).bfloat16()
    full = layer(x)
    assert all(torch.equal(layer(x[i:i + 1]), full[i:i + 1]) for i in range(37))
    assert min_independent_rows(layer) == 1


@pytest.mark.skipif(not VNNI, reason="the W8A8 kernel runs these types where it is built with VNNI")
@pytest.mark.parametrize("kind,layout,bits_per_weight", [("Q5_0", "5-bit, float16 d", 5.5),
                                                         ("Q8_0", "8-bit, float16 d", 8.5),
                                                         ("IQ4_NL", "8-bit, float16 d", 8.5),
                                                         ("Q6_K", "8-bit, float32 d", 10.0)])
def test_the_8_bit_types_take_their_compact_layouts(kind, layout, bits_per_weight):
    """Blocks whole steps from zero store no minimum, the file's float16 scales stay float16, Q5_0's integers take
    5 bits (a decode step reads every weight: Q5_0 at 5.5 bits a weight as llama.cpp reads it, not 10)."""
    w = _weights(kind, rows=128, cols=1024, seed=5)
    layer = make_linear(w, None, "w4a16")
    assert isinstance(layer, W8A8Linear)
    assert layer.weights.layout == layout and layer.nbytes * 8 / w.numel() == bits_per_weight
    q, d, m = w8a8_cpu.unpack(layer.weights)
    back = (q.double().view(128, -1, layer.group) * d.double()[..., None] + m.double()[..., None]).view(128, -1)
    err = (back - w.double()).abs().max().item()
    assert err <= (w.abs().max().item() * 2 ** -22 if kind == "Q6_K" else 0), f"{kind} off by {err}"
