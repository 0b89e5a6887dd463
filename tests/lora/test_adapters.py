"""Adapters as peft saves them and as llama.cpp converts them run exactly as transformers + peft does, and every
adapter that does not fit the base is refused with an error naming the problem."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from sglite.runtime.lora import LoraError, load_lora_adapter
from sglite.runtime.model import load_model

from .adapters import make_peft_adapter, peft_model, write_gguf_lora


@pytest.fixture(scope="module")
def ours(base_folder):
    return load_model(base_folder)     # fp32: the reference format


@pytest.mark.parametrize("name", ["all", "qv", "mixed"])
def test_logits_match_transformers_peft(name, adapters, hf_base, ours, prompt_ids):
    adapter = load_lora_adapter(adapters[name], ours.config, name)
    with torch.no_grad():
        ref = peft_model(hf_base, adapters[name])(torch.tensor([prompt_ids])).logits[0].float()
        base_ref = hf_base(torch.tensor([prompt_ids])).logits[0].float()
    got = ours.logits(prompt_ids, lora=adapter)
    assert (ref - base_ref).abs().max() > 1.0          # the adapter changes the model
    assert (got - ref).abs().max() < 1e-3
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_ranks_and_targets_are_read(adapters, ours):
    mixed = load_lora_adapter(adapters["mixed"], ours.config)
    assert mixed.ranks == frozenset({2, 4, 6})
    qv = load_lora_adapter(adapters["qv"], ours.config)
    assert qv.targets() == ["qkv"]


def test_gguf_lora_equals_peft(adapters, ours, prompt_ids, tmp_path):
    c = ours.config
    # one alpha per file (llama.cpp scales each tensor by alpha / its rank): the adapter without patterns
    path = write_gguf_lora(adapters["all"], tmp_path / "all.gguf", c.architecture, c.num_heads, c.num_kv_heads)
    from_gguf = load_lora_adapter(path, c)
    from_peft = load_lora_adapter(adapters["all"], c)
    assert torch.allclose(ours.logits(prompt_ids, lora=from_gguf), ours.logits(prompt_ids, lora=from_peft),
                          atol=1e-5, rtol=0)


def _copy(folder, tmp_path, edit_config=None):
    out = tmp_path / "edited"
    shutil.copytree(folder, out)
    if edit_config is not None:
        path = out / "adapter_config.json"
        cfg = json.loads(path.read_text())
        edit_config(cfg)
        path.write_text(json.dumps(cfg))
    return out


def test_missing_path_and_folder_without_config(ours, tmp_path):
    with pytest.raises(LoraError, match="does not exist"):
        load_lora_adapter(tmp_path / "nope", ours.config)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoraError, match="no adapter_config.json"):
        load_lora_adapter(tmp_path / "empty", ours.config)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(LoraError, match="not a GGUF file"):
        load_lora_adapter(tmp_path / "notes.txt", ours.config)


@pytest.mark.parametrize("key,value,match", [
    ("use_dora", True, "use_dora"),
    ("fan_in_fan_out", True, "fan_in_fan_out"),
    ("modules_to_save", ["lm_head"], "modules_to_save"),
    ("bias", "all", "bias"),
    ("peft_type", "IA3", "IA3"),
])
def test_unsupported_peft_options_are_refused(adapters, ours, tmp_path, key, value, match):
    folder = _copy(adapters["qv"], tmp_path, lambda cfg: cfg.__setitem__(key, value))
    with pytest.raises(LoraError, match=match):
        load_lora_adapter(folder, ours.config)


def test_unknown_target_module_is_refused(hf_base, ours, tmp_path):
    folder = make_peft_adapter(hf_base, tmp_path / "head", targets=["q_proj", "lm_head"])
    with pytest.raises(LoraError, match="lm_head"):
        load_lora_adapter(folder, ours.config)


def test_adapter_of_another_base_is_refused(tokenizer, ours, tmp_path):
    from ..runtime.hf_checkpoints import VARIANTS, load_reference, write_checkpoint

    variant = next(v for v in VARIANTS if v.name == "qwen3-qknorm")     # head_dim 32: q_proj maps 64 -> 128
    other = load_reference(write_checkpoint(tmp_path / "qwen3", variant, tokenizer))
    folder = make_peft_adapter(other, tmp_path / "qwen3-lora", targets=["q_proj"])
    with pytest.raises(LoraError, match=r"q_proj.*64 -> 64.*trained for another model"):
        load_lora_adapter(folder, ours.config)


def test_layer_out_of_range_and_stray_tensor_are_refused(adapters, ours, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(adapters["qv"], tmp_path)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    key = next(k for k in tensors if ".layers.0." in k)
    save_file({**tensors, key.replace(".layers.0.", ".layers.7."): tensors[key].clone()}, str(folder / "adapter_model.safetensors"))
    with pytest.raises(LoraError, match="layer 7"):
        load_lora_adapter(folder, ours.config)
    save_file({**tensors, "base_model.model.lm_head.weight": torch.zeros(4, 4)}, str(folder / "adapter_model.safetensors"))
    with pytest.raises(LoraError, match="lm_head"):
        load_lora_adapter(folder, ours.config)


def test_nan_factors_are_refused(adapters, ours, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(adapters["qv"], tmp_path)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    key = next(iter(tensors))
    tensors[key] = tensors[key].clone()
    tensors[key][0, 0] = float("nan")
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    with pytest.raises(LoraError, match="NaN"):
        load_lora_adapter(folder, ours.config)


def test_gguf_that_is_not_an_adapter_or_of_another_arch(adapters, ours, tmp_path):
    import gguf

    path = tmp_path / "model.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.type", "model")
    w.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(LoraError, match="not a LoRA adapter"):
        load_lora_adapter(path, ours.config)
    c = ours.config
    other = write_gguf_lora(adapters["qv"], tmp_path / "qwen.gguf", "qwen2", c.num_heads, c.num_kv_heads)
    with pytest.raises(LoraError, match="'qwen2'"):
        load_lora_adapter(other, ours.config)


@pytest.mark.parametrize("decode_from", [None, 0])            # prefill rows, decode rows
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_delta_does_not_depend_on_its_batch(adapters, ours, dtype, decode_from):
    """The bits a row gets are the same alone, among other rows of its adapter, and beside other adapters."""
    from sglite.runtime.lora import LoraBatch

    a = load_lora_adapter(adapters["all"], ours.config)
    b = load_lora_adapter(adapters["other"], ours.config)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 64, generator=g).to(dtype)
    y0 = torch.randn(40, 128 + 128, generator=g).to(dtype)      # gate_up: 64 -> 2 x 128

    def run(adapters_per_row, rows):
        xs, ys = x[rows].clone(), y0[rows].clone()
        LoraBatch.build(adapters_per_row, [1] * len(rows), decode_from).apply(0, "gate_up", xs, ys)
        return ys

    alone = run([a], [5])[0]
    for n in (3, 17, 40):
        rows = list(range(n)) if 5 < n else [0, 1, 5]
        mixed = [a if i % 3 == 0 or i == 5 else (b if i % 3 == 1 else None) for i in rows]
        got = run(mixed, rows)[rows.index(5)]
        assert torch.equal(got, alone), n
