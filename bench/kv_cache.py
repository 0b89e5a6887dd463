"""KV cache formats: decode speed at long contexts and what a fixed memory holds, sglite's default cache beside
int8 and fp8 e4m3, and llama.cpp's f16 and q8_0 caches (`llama-bench -ctk/-ctv`) on the same GGUF, same threads.

    bash bench/build_llamacpp.sh               # once: llama-bench into ~/.cache
    python bench/kv_cache.py [--threads 2] [--contexts 1024,4096] [--memory-mib 64]
    python bench/kv_cache.py --skip-llamacpp

Decode tok/s at a context of N tokens: one request, N prompt tokens of real text (the fidelity corpus, repeated
to length), 32 greedy tokens with ignore_eos, (completion_tokens - 1) / (e2e - ttft) (the first token comes out
of the prefill), median of --reps; llama-bench's `-p 0 -n 32 -d N` times 32 single-token steps after N tokens
of depth. A batch of 8 such requests at the first context gives the batched figure (sglite only: llama-bench
runs one sequence).

Memory: an engine per format with kv_cache_bytes = --memory-mib and max_total_tokens unset reports the tokens
its pool holds (get_stats) and how many requests of the first context (plus 32 new tokens) fit at once; for
llama.cpp the same memory divided by its cache's bytes per token (f16: 2 bytes a value, q8_0: 34 bytes per 32
values), computed, not measured."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from vs_llamacpp import DEFAULT_BIN_DIR, find_binaries, fmt, machine_info  # noqa: E402

FORMATS = ("auto", "int8", "fp8_e4m3")
CORPUS = BENCH.parent / "tests" / "runtime" / "data" / "fidelity_corpus.txt"
NEW = 32
LLAMA_BYTES_PER_VALUE = {"f16": 2.0, "q8_0": 34 / 32}


def long_prompt(tokenizer, n: int, salt: int) -> list[int]:
    """n tokens of the corpus, repeated to length, starting `salt` tokens in (distinct prompts: no cache hit)."""
    ids = tokenizer.encode(CORPUS.read_text(encoding="utf-8"))
    out = []
    while len(out) < n + salt:
        out += ids
    return out[salt:salt + n]


def decode_rate(engine, prompts: list[list[int]]) -> float:
    engine.flush_cache()
    outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": NEW, "temperature": 0,
                                                               "ignore_eos": True})
    metas = [o["meta_info"] for o in outs]
    decode_s = max(m["e2e_latency"] for m in metas) - max(m["ttft"] for m in metas)
    return sum(m["completion_tokens"] - 1 for m in metas) / decode_s


def llama_decode(exe: Path, gguf: Path, threads: int, depth: int, cache: str, reps: int) -> float:
    out = subprocess.run([str(exe), "-m", str(gguf), "-t", str(threads), "-p", "0", "-n", str(NEW), "-d", str(depth),
                          "-ctk", cache, "-ctv", cache, "-fa", "on", "-r", str(reps), "-o", "json"],
                         capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)[0]["avg_ts"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--memory-mib", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    args = ap.parse_args(argv)
    contexts = [int(c) for c in args.contexts.split(",")]
    exes = None if args.skip_llamacpp else find_binaries(args.llamacpp_bin)

    import torch

    from sglite.runtime.engine import Engine
    from sglite.runtime.model import load_model
    from sglite.runtime.model_source import resolve_model_path

    torch.set_num_threads(args.threads)
    gguf = resolve_model_path(args.model)
    info = machine_info()
    print(f"CPU: {info['cpu']}\nCPU flags: {info['flags']}\ntorch: {info['torch']}\nmodel: {gguf.name}\n"
          f"threads {args.threads}; contexts {contexts}; memory {args.memory_mib} MiB")
    model = load_model(gguf, weights=args.weights)
    print(f"sglite weights: {model.net.plan}; activations {model.net.dtype}")
    ours: dict[str, dict] = {}
    budget = args.memory_mib << 20
    for kv in FORMATS:
        print(f"sglite: {kv} ...", file=sys.stderr, flush=True)
        row: dict = {}
        e = Engine(model=model, kv_cache_dtype=kv, max_total_tokens=max(contexts) * 8 + 8 * NEW + 64,
                   max_running_requests=8, num_threads=args.threads)
        row["bytes_per_token"] = e.get_stats()["kv_cache_bytes"] / (e.get_stats()["max_total_tokens"] + 1)
        for n in contexts:
            row[n] = statistics.median(decode_rate(e, [long_prompt(e.tokenizer, n, 97 * r + 1)])
                                       for r in range(args.reps))
        row["batch8"] = decode_rate(e, [long_prompt(e.tokenizer, contexts[0], 31 * i + 5) for i in range(8)])
        e.shutdown()
        e = Engine(model=model, kv_cache_dtype=kv, kv_cache_bytes=budget, max_running_requests=4096)
        row["tokens"] = e.get_stats()["max_total_tokens"]
        row["requests"] = row["tokens"] // (contexts[0] + NEW)
        e.shutdown()
        ours[kv] = row
    theirs: dict[str, dict] = {}
    if exes:
        c = model.config
        for cache in ("f16", "q8_0"):
            print(f"llama.cpp: {cache} ...", file=sys.stderr, flush=True)
            row = {n: llama_decode(exes["llama-bench"], gguf, args.threads, n, cache, args.reps) for n in contexts}
            row["bytes_per_token"] = 2 * c.num_layers * c.num_kv_heads * c.head_dim * LLAMA_BYTES_PER_VALUE[cache]
            row["tokens"] = int(budget // row["bytes_per_token"])
            row["requests"] = row["tokens"] // (contexts[0] + NEW)
            theirs[cache] = row

    head = " | ".join(f"decode tok/s @ {n}" for n in contexts)
    print(f"\n| cache | bytes / token | {head} | decode tok/s, 8 x {contexts[0]} | tokens in {args.memory_mib} MiB "
          f"| requests of {contexts[0]} + {NEW} at once |")
    print("|---|---:|" + "---:|" * len(contexts) + "---:|---:|---:|")
    for name, row in [(f"sglite {k}", v) for k, v in ours.items()] + [(f"llama.cpp {k}", v) for k, v in theirs.items()]:
        rates = " | ".join(fmt(row[n]) for n in contexts)
        print(f"| {name} | {row['bytes_per_token']:,.0f} | {rates} | {fmt(row.get('batch8'))} | {row['tokens']:,} "
              f"| {row['requests']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
