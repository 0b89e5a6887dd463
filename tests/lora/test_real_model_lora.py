"""The real model under a LoRA adapter (slow): SmolLM2's GGUF file with a peft adapter made on transformers'
reading of the same file. With the weight format this machine's plan picks, teacher-forced top-1 agrees with
transformers + peft at >= 98% of positions, through prefill rows and decode rows alike."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sglite.runtime.lora import load_lora_adapter

from .adapters import make_peft_adapter, peft_model

pytestmark = pytest.mark.slow
CORPUS = Path(__file__).parent.parent / "runtime" / "data" / "fidelity_corpus.txt"
CHUNK = 256


@pytest.fixture(scope="module")
def hf_smollm():
    import transformers

    from sglite.runtime.model_source import default_model_path

    path = default_model_path()
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                             dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def adapter_folder(hf_smollm, tmp_path_factory):
    return make_peft_adapter(hf_smollm, tmp_path_factory.mktemp("smollm-lora") / "a", r=16, alpha=32, seed=7,
                             spread=0.25)


def windows(tokenizer) -> list[list[int]]:
    ids = tokenizer.encode(CORPUS.read_text(encoding="utf-8"))
    return [ids[i:i + CHUNK] for i in range(0, min(len(ids), 4 * CHUNK), CHUNK)]


def decode_rows_logits(model, ids: list[int], adapter) -> torch.Tensor:
    """Teacher-forced logits with every row run through the plan's decode formats (num_prefill=0)."""
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool
    from sglite.runtime.lora import LoraBatch

    c = model.config
    pool = KVPool(c.num_layers, len(ids) + 1, c.num_kv_heads, c.head_dim, model.net.dtype)
    table = torch.zeros((1, len(ids)), dtype=torch.int32)
    fb = ForwardBatch.build([ids], [0], [0], torch.arange(1, len(ids) + 1), table,
                            logits_indices=torch.arange(len(ids)), num_prefill=0)
    fb.lora = LoraBatch.build([adapter], [len(ids)], fb.decode_from)
    return model.net.forward(fb, create_attention_backend("torch", pool, "cpu"))


@pytest.fixture(scope="module", params=["auto", "bf16"])
def model(request, real_model):
    """The plan this machine picks (the real_model fixture), and bf16, which other machines pick."""
    if request.param == "auto":
        return real_model
    from sglite.runtime.model import load_model
    return load_model(weights=request.param)


def test_teacher_forced_agreement_with_transformers_peft(model, hf_smollm, adapter_folder):
    real_model = model
    adapter = load_lora_adapter(adapter_folder, real_model.config, "a")
    ref_model = peft_model(hf_smollm, adapter_folder)
    agree = {"prefill": 0, "decode": 0}
    moved = total = 0
    for w in windows(real_model.tokenizer):
        with torch.no_grad():
            ref = ref_model(torch.tensor([w])).logits[0].argmax(-1)
            base = hf_smollm(torch.tensor([w])).logits[0].argmax(-1)
        agree["prefill"] += int((real_model.logits(w, lora=adapter).argmax(-1) == ref).sum())
        agree["decode"] += int((decode_rows_logits(real_model, w, adapter).argmax(-1) == ref).sum())
        moved += int((ref != base).sum())
        total += len(w)
    print(f"\nplan {real_model.net.plan}: top-1 agreement {agree} of {total}, adapter moved {moved}")
    assert moved >= 0.05 * total, "the adapter barely changes the model: the comparison would prove little"
    for path, n in agree.items():
        assert n >= 0.98 * total, f"{path} rows: top-1 agrees at {n}/{total} positions under {real_model.net.plan}"
