"""Prefill and decode throughput of the model forward pass at batch 1, 8, 32, beside transformers' generate.

    python bench/forward.py [--prompt-tokens 128] [--decode-tokens 32] [--batches 1,8,32] [--no-transformers]

Both sides: the default SmolLM2-135M-Instruct GGUF in float32 on the CPU, greedy, same prompts. Ours runs
LlamaModel.forward over the paged KV pool directly (no scheduler), so this measures the model runtime."""
from __future__ import annotations

import argparse
import time

import torch


def make_prompts(tok, batch: int, n_tokens: int) -> list[list[int]]:
    base = ("Quarterly report: revenue grew while operating costs fell. Management expects demand to remain "
            "strong across all regions, with risks from currency moves and supply chains. ") * 20
    ids = tok.encode(base)
    return [ids[i % 7: i % 7 + n_tokens] for i in range(batch)]


def run_ours(model, prompts: list[list[int]], decode_tokens: int) -> tuple[float, float]:
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool

    c = model.config
    B, P = len(prompts), len(prompts[0])
    pool = KVPool(c.num_layers, B * (P + decode_tokens) + 1, c.num_kv_heads, c.head_dim)
    attn = create_attention_backend("torch", pool, "cpu")
    table = torch.zeros((B, P + decode_tokens), dtype=torch.int32)
    t0 = time.perf_counter()
    slots = torch.arange(1, B * P + 1)
    logits = model.net.forward(ForwardBatch.build(prompts, [0] * B, list(range(B)), slots, table), attn)
    t1 = time.perf_counter()
    next_slot = B * P + 1
    for step in range(decode_tokens - 1):
        toks = logits.argmax(-1).tolist()
        slots = torch.arange(next_slot, next_slot + B)
        next_slot += B
        fb = ForwardBatch.build([[t] for t in toks], [P + step] * B, list(range(B)), slots, table)
        logits = model.net.forward(fb, attn)
    t2 = time.perf_counter()
    return B * P / (t1 - t0), B * (decode_tokens - 1) / (t2 - t1)


def run_transformers(hf, prompts: list[list[int]], decode_tokens: int) -> tuple[float, float]:
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)
    kw = dict(do_sample=False, pad_token_id=2, eos_token_id=None, attention_mask=mask)
    with torch.no_grad():
        t0 = time.perf_counter()
        hf.generate(ids, max_new_tokens=1, **kw)
        t1 = time.perf_counter()
        hf.generate(ids, max_new_tokens=decode_tokens, **kw)
        t2 = time.perf_counter()
    B, P = ids.shape
    prefill = t1 - t0
    return B * P / prefill, B * (decode_tokens - 1) / max(t2 - t1 - prefill, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args()

    from sglite.runtime.model import load_model
    from sglite.runtime.model_source import default_model_path

    model = load_model()
    hf = None
    if not args.no_transformers:
        import transformers
        path = default_model_path()
        hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                               dtype=torch.float32).eval()
    print(f"torch threads: {torch.get_num_threads()}; prompt {args.prompt_tokens} tokens, "
          f"decode {args.decode_tokens} tokens, float32 CPU\n")
    print("| batch | sglite prefill tok/s | transformers prefill tok/s | sglite decode tok/s | "
          "transformers decode tok/s | decode speed-up |")
    print("|---:|---:|---:|---:|---:|---:|")
    base = None
    for b in [int(x) for x in args.batches.split(",")]:
        prompts = make_prompts(model.tokenizer, b, args.prompt_tokens)
        run_ours(model, prompts[:1], 3)  # warm-up
        op, od = run_ours(model, prompts, args.decode_tokens)
        hp, hd = run_transformers(hf, prompts, args.decode_tokens) if hf is not None else (float("nan"),) * 2
        base = base or od
        print(f"| {b} | {op:,.0f} | {hp:,.0f} | {od:,.1f} | {hd:,.1f} | {od / hd:.2f}x |", flush=True)
    print(f"\nsglite decode at the largest batch is {od / base:.1f}x its batch-1 throughput")


if __name__ == "__main__":
    main()
