"""Test models at the sizes users run, built here (no hub is reachable): random weights in the exact shapes of
Llama-3.2-1B, Llama-3.2-3B, Qwen2.5-1.5B and Llama-3.1-8B, written as an HF checkpoint, converted by llama.cpp's
own convert_hf_to_gguf.py and quantized by llama-quantize. Speed depends on shapes, not values (the Qwen shapes
are written in the llama layout, biases included; see MODELS).

    python bench/sized_models.py --models llama-1b,llama-3b --types Q4_K_M,Q8_0,Q6_K
    -> ~/.cache/sglite/sized/llama-1b/llama-1b-Q4_K_M.gguf, ...

The tokenizer is SmolLM2's (49,152 tokens, from the bundled GGUF; the converter knows its pre-tokenizer), the
vocabulary padded to the model's own size so the embedding and head have their real shapes. Files are cached:
a run makes only what is missing. Tensors are written one at a time (peak memory about one layer), so the 8B
checkpoint builds on a 16 GB machine; the bf16 GGUF it quantizes from is kept for the next type."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("SGLITE_SIZED_DIR", Path.home() / ".cache" / "sglite" / "sized"))
LLAMACPP = Path(os.environ.get("LLAMACPP_BIN_DIR", Path.home() / ".cache" / "sglite" / "llama.cpp" / "bin"))


@dataclass(frozen=True)
class Shape:
    arch: str            # HF architecture
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    rope_theta: float
    head_dim: int | None = None
    qkv_bias: bool = False
    rope_scaling: dict | None = None


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
MODELS = {
    "llama-1b": Shape("LlamaForCausalLM", 2048, 8192, 16, 32, 8, 128256, True, 500000.0, 64,
                      rope_scaling=LLAMA3_SCALING),
    "llama-3b": Shape("LlamaForCausalLM", 3072, 8192, 28, 24, 8, 128256, True, 500000.0, 128,
                      rope_scaling=LLAMA3_SCALING),
    # Qwen2.5-1.5B's shapes (q/k/v biases included) in the llama layout: the converter's qwen2 path reads the
    # tokenizer through Qwen2's own class, whose pre-tokenizer it does not recognise with SmolLM2's vocabulary
    "qwen-1.5b": Shape("LlamaForCausalLM", 1536, 8960, 28, 12, 2, 151936, True, 1000000.0, qkv_bias=True),
    "llama-8b": Shape("LlamaForCausalLM", 4096, 14336, 32, 32, 8, 128256, False, 500000.0, 128,
                      rope_scaling={**LLAMA3_SCALING, "factor": 8.0}),
}
TYPES = ("Q4_K_M", "Q8_0", "Q6_K", "Q5_K_M", "Q4_0")


def gguf_path(name: str, qtype: str) -> Path:
    return CACHE / name / f"{name}-{qtype}.gguf"


def config_json(s: Shape) -> dict:
    head_dim = s.head_dim or s.hidden // s.heads
    cfg = {"architectures": [s.arch], "model_type": "llama" if s.arch.startswith("Llama") else "qwen2",
           "hidden_size": s.hidden, "intermediate_size": s.intermediate, "num_hidden_layers": s.layers,
           "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": head_dim,
           "vocab_size": s.vocab, "tie_word_embeddings": s.tied, "rope_theta": s.rope_theta,
           "rms_norm_eps": 1e-5 if s.arch.startswith("Llama") else 1e-6, "hidden_act": "silu",
           "max_position_embeddings": 131072 if s.rope_scaling else 32768, "torch_dtype": "bfloat16",
           "bos_token_id": 1, "eos_token_id": 2}
    if s.rope_scaling:
        cfg["rope_scaling"] = s.rope_scaling
    if s.qkv_bias:
        cfg["attention_bias"] = True
    return cfg


def write_checkpoint(s: Shape, folder: Path, seed: int = 0) -> None:
    """config.json, the tokenizer and the weights (one safetensors shard per layer), random N(0, 0.02)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_json(s), indent=1))
    write_tokenizer(folder)
    g = torch.Generator().manual_seed(seed)
    head_dim = s.head_dim or s.hidden // s.heads

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    shards: dict[str, dict[str, torch.Tensor]] = {"embed": {"model.embed_tokens.weight": rand(s.vocab, s.hidden),
                                                            "model.norm.weight": torch.ones(s.hidden, dtype=torch.bfloat16)}}
    if not s.tied:
        shards["embed"]["lm_head.weight"] = rand(s.vocab, s.hidden)
    index: dict[str, str] = {}

    def flush(key: str, tensors: dict) -> None:
        name = f"model-{key}.safetensors"
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        index.update(dict.fromkeys(tensors, name))

    flush("embed", shards.pop("embed"))
    for i in range(s.layers):
        p = f"model.layers.{i}."
        t = {p + "self_attn.q_proj.weight": rand(s.heads * head_dim, s.hidden),
             p + "self_attn.k_proj.weight": rand(s.kv_heads * head_dim, s.hidden),
             p + "self_attn.v_proj.weight": rand(s.kv_heads * head_dim, s.hidden),
             p + "self_attn.o_proj.weight": rand(s.hidden, s.heads * head_dim),
             p + "mlp.gate_proj.weight": rand(s.intermediate, s.hidden),
             p + "mlp.up_proj.weight": rand(s.intermediate, s.hidden),
             p + "mlp.down_proj.weight": rand(s.hidden, s.intermediate),
             p + "input_layernorm.weight": torch.ones(s.hidden, dtype=torch.bfloat16),
             p + "post_attention_layernorm.weight": torch.ones(s.hidden, dtype=torch.bfloat16)}
        if s.qkv_bias:
            t[p + "self_attn.q_proj.bias"] = rand(s.heads * head_dim)
            t[p + "self_attn.k_proj.bias"] = rand(s.kv_heads * head_dim)
            t[p + "self_attn.v_proj.bias"] = rand(s.kv_heads * head_dim)
        flush(f"layer{i:03d}", t)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))


def write_tokenizer(folder: Path) -> None:
    """SmolLM2's tokenizer (tokenizer.json and its config), read from the bundled GGUF by transformers."""
    # this folder holds a kernels.py, which would shadow the `kernels` package transformers imports
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    from transformers import AutoTokenizer

    from sglite.runtime.model_source import resolve_model_path

    gguf = resolve_model_path(None)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(str(folder))
    # read back as the generic fast tokenizer: for a qwen2 config transformers would otherwise pick Qwen2's
    # class, whose own pre-tokenizer the converter does not recognise
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=1))


def build(name: str, types: list[str], keep_bf16: bool = True) -> dict[str, Path]:
    s = MODELS[name]
    out = {t: gguf_path(name, t) for t in types}
    todo = [t for t, p in out.items() if not p.exists()]
    if not todo:
        return out
    base = CACHE / name / f"{name}-BF16.gguf"
    if not base.exists():
        hf = CACHE / name / "hf"
        t0 = time.perf_counter()
        write_checkpoint(s, hf)
        print(f"{name}: checkpoint in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        convert = LLAMACPP.parent / "src"
        script = next(convert.glob("*/llama.cpp/convert_hf_to_gguf.py"), None)
        if script is None:
            raise SystemExit(f"convert_hf_to_gguf.py not found under {convert}: run bench/build_llamacpp.sh")
        env = {**os.environ, "PYTHONPATH": str(script.parent / "gguf-py")}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, str(script), str(hf), "--outtype", "bf16", "--outfile", str(base)],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{script.name} failed on {hf}:\n{done.stderr[-3000:]}")
        print(f"{name}: BF16 GGUF in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        for f in hf.iterdir():
            f.unlink()
        hf.rmdir()
    for t in todo:
        t0 = time.perf_counter()
        subprocess.run([str(LLAMACPP / "llama-quantize"), str(base), str(out[t]), t, str(os.cpu_count() or 2)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"{name}: {t} in {time.perf_counter() - t0:.0f} s ({out[t].stat().st_size / 1e9:.2f} GB)",
              file=sys.stderr, flush=True)
    if not keep_bf16:
        base.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama-1b", help=f"comma list of {list(MODELS)}")
    ap.add_argument("--types", default="Q4_K_M", help=f"comma list of llama-quantize types, e.g. {list(TYPES)}")
    ap.add_argument("--drop-bf16", action="store_true", help="delete the bf16 GGUF after quantizing")
    args = ap.parse_args(argv)
    names = args.models.split(",")
    bad = [n for n in names if n not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; give some of {list(MODELS)}")
    if not os.access(LLAMACPP / "llama-quantize", os.X_OK):
        ap.error(f"{LLAMACPP / 'llama-quantize'} not found: run bench/build_llamacpp.sh (or set LLAMACPP_BIN_DIR)")
    for name in names:
        for t, p in build(name, args.types.split(","), keep_bf16=not args.drop_bf16).items():
            print(f"{name} {t}: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
