"""AWQ (GEMM) and GPTQ (act-order or not, v1 and v2 zeros) checkpoints: the packed tensors, written here from a
known 4-bit quantization by each format's definition, read back to exactly those values; the model computes
with them as with an unquantized checkpoint holding the same values (fp32 bit for bit; the 4-bit kernels to
their rounding), without a float32 copy at rest; what sglite cannot read is refused by name."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from sglite.runtime.config import UnsupportedModelError
from sglite.runtime.hf_quant import AWQ_ORDER, QuantSpec

from .hf_checkpoints import VARIANTS, write_checkpoint

LLAMA = next(v for v in VARIANTS if v.config_class == "LlamaConfig")
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _quantize(w: torch.Tensor, group: int, g_idx: torch.Tensor, gen: torch.Generator, zero_from: int = 0):
    """A known 4-bit quantization of w [out, in]: q [in, out] 0..15, zeros [groups, out] zero_from..zero_from + 15
    (GPTQ v1 stores zero - 1 in 4 bits: its zeros are 1..16), scales float16 [groups, out], the values
    w'[o, i] = s[g_idx[i], o] * (q[i, o] - z[g_idx[i], o])."""
    out_f, in_f = w.shape
    groups = in_f // group
    scales = (torch.rand(groups, out_f, generator=gen) * 0.1 + 0.01).half()
    zeros = torch.randint(0, 16, (groups, out_f), generator=gen) + zero_from
    q = torch.randint(0, 16, (in_f, out_f), generator=gen)
    values = (scales.float()[g_idx] * (q - zeros[g_idx]).float()).T.contiguous()
    return q, zeros, scales, values


def _pack_rows(v: torch.Tensor) -> torch.Tensor:
    """[R, C] 0..15 -> int32 [R / 8, C]: value i of a column in bits 4 (i % 8) of row i // 8 (GPTQ qweight)."""
    v = v.to(torch.int64).view(v.shape[0] // 8, 8, v.shape[1])
    packed = sum(v[:, k] << (4 * k) for k in range(8))
    return torch.where(packed >= 1 << 31, packed - (1 << 32), packed).to(torch.int32)


def _pack_cols(v: torch.Tensor, order=tuple(range(8))) -> torch.Tensor:
    """[R, C] 0..15 -> int32 [R, C / 8]: nibble k of each int32 holds column 8c + order[k]."""
    v = v.to(torch.int64).view(v.shape[0], -1, 8)
    packed = sum(v[:, :, order[k]] << (4 * k) for k in range(8))
    return torch.where(packed >= 1 << 31, packed - (1 << 32), packed).to(torch.int32)


def _write_quantized(folder, method: str, group: int = 32, act_order: bool = False, v2: bool = False):
    """Replaces every projection of the checkpoint in `folder` by its packed quantization (and writes the same
    values unquantized to folder/'dense'). Returns {gguf name: values}."""
    from safetensors.torch import load_file, save_file

    gen = torch.Generator().manual_seed(1)
    files = sorted(folder.glob("*.safetensors"))
    tensors = {k: v for f in files for k, v in load_file(str(f)).items()}
    dense, quant, values = dict(tensors), {}, {}
    for name, w in tensors.items():
        base, _, kind = name.rpartition(".")
        if kind != "weight" or base.rpartition(".")[2] not in PROJ:
            quant[name] = w
            continue
        in_f = w.shape[1]
        g_idx = torch.arange(in_f) // group
        if act_order:
            g_idx = g_idx[torch.randperm(in_f, generator=gen)]
        q, zeros, scales, vals = _quantize(w, group, g_idx, gen, zero_from=int(method == "gptq" and not v2))
        dense[name] = vals
        if method == "gptq":
            quant[base + ".qweight"] = _pack_rows(q)
            quant[base + ".qzeros"] = _pack_cols(zeros if v2 else zeros - 1)   # v1 stores zero - 1
            quant[base + ".g_idx"] = g_idx.to(torch.int32)
        else:
            quant[base + ".qweight"] = _pack_cols(q, AWQ_ORDER)
            quant[base + ".qzeros"] = _pack_cols(zeros, AWQ_ORDER)
        quant[base + ".scales"] = scales
        values[name] = vals
    dense_dir = folder / "dense"
    shutil.copytree(folder, dense_dir, ignore=shutil.ignore_patterns("dense", "*.safetensors"))
    save_file({k: v.contiguous() for k, v in dense.items()}, str(dense_dir / "model.safetensors"))
    for f in files:
        f.unlink()
    save_file({k: v.contiguous() for k, v in quant.items()}, str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": method, "bits": 4, "group_size": group, "desc_act": act_order,
                                  **({"checkpoint_format": "gptq_v2"} if v2 else {}),
                                  **({"version": "gemm", "zero_point": True} if method == "awq" else {})}
    (folder / "config.json").write_text(json.dumps(cfg))
    return values


CASES = [("awq", 32, False, False), ("gptq", 32, False, False), ("gptq", 64, True, False), ("gptq", 32, False, True)]


@pytest.mark.parametrize("method, group, act_order, v2", CASES)
def test_packed_values_and_logits(tmp_path, tokenizer, method, group, act_order, v2):
    from sglite.runtime.model import load_model
    from sglite.runtime.weights import HFQuantTensors, load_config_and_weights

    folder = write_checkpoint(tmp_path / "m", LLAMA, tokenizer)
    values = _write_quantized(folder, method, group, act_order, v2)
    config, tensors = load_config_and_weights(folder)
    assert isinstance(tensors, HFQuantTensors)
    for hf_name, want in values.items():
        i, proj = hf_name.split(".")[2], hf_name.split(".")[-2]
        name = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
                "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}[proj]
        got = tensors[f"blk.{i}.{name}.weight"]
        assert torch.equal(got, want), hf_name
        q, scale, lo, bits = tensors.grid(f"blk.{i}.{name}.weight")
        permuted = tensors.input_perm(f"blk.{i}.{name}.weight") is not None
        assert q.dtype == torch.uint8 and bits == 4 and permuted == (act_order and want.shape[1] > group)
    ids = tokenizer.encode("Revenue rose 12% in the third quarter.")
    ref = load_model(str(folder / "dense")).logits(ids)
    assert torch.equal(load_model(str(folder)).logits(ids), ref)           # fp32: the same values, the same logits
    from sglite.kernels import w4a8_cpu
    if w4a8_cpu.available():
        fast = load_model(str(folder), weights="w4a8")
        assert all(type(L.qkv).__name__ in ("W4A8Linear", "StackedLinear") for L in fast.net.layers)
        got = fast.logits(ids)
        # the kernel's own rounding (its activations in one int8 digit), as on the same values unquantized
        same_values = load_model(str(folder / "dense"), weights="w4a8").logits(ids)
        assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8
        assert (got - ref).abs().max() <= 1.5 * (same_values - ref).abs().max() + 1e-3


@pytest.mark.parametrize("qc, says", [
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "bits=8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}, "version='gemv'"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 100}, "group_size=100"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes'"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"}, "'marlin'"),
])
def test_unsupported_quantizations_name_themselves(qc, says):
    with pytest.raises(UnsupportedModelError, match=says):
        QuantSpec.from_config(qc, "m")
