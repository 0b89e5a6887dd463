"""The cost of LoRA per decode step: one batch of requests under 0, 1, 4 or 8 distinct adapters, sglite beside
llama-server with the same adapters converted by llama.cpp's convert_lora_to_gguf.py, same GGUF, same threads.

    bash bench/build_llamacpp.sh            # once: llama-server (and the converter's source) into ~/.cache
    python bench/lora.py [--threads 2] [--batch 8] [--new-tokens 48] [--rank 16]
    python bench/lora.py --skip-llamacpp    # ours only

Adapters: peft LoRAs (rank --rank, every projection q/k/v/o/gate/up/down, random A and B of a size that moves
the model's outputs) made on transformers' reading of the GGUF file, saved as peft saves them; sglite loads the
folders (`Engine(lora_paths=...)`), llama-server the GGUF files the converter writes from them (f32), started with
`--lora-init-without-apply` and each request naming its adapter (`"lora": [{"id": i, "scale": 1}]`).

Each row: `--batch` requests of 16 tokens of real text, distinct per request and run (no prefix-cache hit), `--new-tokens` greedy tokens
each with ignore_eos, sent together; request i runs under adapter i mod k (k = 0: the base). tok/s = completion
tokens / wall time of the whole batch, prefill included, on both sides; medians of --reps runs. "agree" is the
share of the batch's greedy tokens sglite and llama.cpp both produce at the same positions (before the first
difference), a check that both apply the same adapters (llama.cpp runs the quantized GGUF, so some divergence
is rounding)."""
from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from vs_llamacpp import DEFAULT_BIN_DIR, LlamaServer, find_binaries, fmt, machine_info, ratio  # noqa: E402

# bench/kernels.py would shadow the `kernels` package transformers imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]

COUNTS = (0, 1, 4, 8)
CORPUS = BENCH.parent / "tests" / "runtime" / "data" / "fidelity_corpus.txt"
PROMPT_TOKENS = 16


def make_adapters(gguf: Path, root: Path, n: int, rank: int, converter: Path | None) -> tuple[list[Path], list[Path]]:
    """n peft folders under root (and, with the converter, n GGUF LoRA files beside them)."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    hf = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    base_dir = root / "base"
    config = copy.deepcopy(hf.config)
    config.architectures = [type(hf).__name__]       # the converter picks its model class by this
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(base_dir)                 # the converter reads the base's config only
    transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(base_dir)
    folders, files = [], []
    for i in range(n):
        model = get_peft_model(copy.deepcopy(hf), LoraConfig(
            r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"]))
        g = torch.Generator().manual_seed(100 + i)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5 * 0.25)
        folder = root / f"lora{i}"
        model.save_pretrained(folder)
        folders.append(folder)
        if converter is not None:
            out = root / f"lora{i}.gguf"
            subprocess.run([sys.executable, str(converter), "--base", str(base_dir), "--outtype", "f32",
                            "--outfile", str(out), str(folder)], check=True, capture_output=True)
            files.append(out)
    return folders, files


def batches(tokenizer, batch: int, reps: int) -> list[list[list[int]]]:
    """reps + 1 batches (the first a warm-up) of distinct 16-token slices of real text (the fidelity corpus:
    English, Chinese, code, numbers), the same for both sides."""
    ids = tokenizer.encode(CORPUS.read_text(encoding="utf-8"))
    n = batch * (reps + 1)
    step = max(PROMPT_TOKENS, (len(ids) - PROMPT_TOKENS) // n)
    slices = [ids[i * step:i * step + PROMPT_TOKENS] for i in range(n)]
    return [slices[r * batch:(r + 1) * batch] for r in range(reps + 1)]


def ours(engine, prompt_sets, k: int, new_tokens: int) -> tuple[float, list[list[int]]]:
    rates, last = [], []
    for prompts in prompt_sets:
        loras = [None if k == 0 else f"lora{i % k}" for i in range(len(prompts))]
        engine.flush_cache()
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, lora_path=loras, sampling_params={
            "max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True})
        wall = time.perf_counter() - t0
        rates.append(sum(o["meta_info"]["completion_tokens"] for o in outs) / wall)
        last = [o["output_ids"] for o in outs]
    return statistics.median(rates[1:]), last


def theirs(server, prompt_sets, k: int, n_adapters: int, new_tokens: int) -> tuple[float, list[list[int]]]:
    def one(args):
        i, prompt = args
        lora = [{"id": j, "scale": 1.0 if k and j == i % k else 0.0} for j in range(n_adapters)]
        r = server.client.post("/completion", json={"prompt": prompt, "n_predict": new_tokens, "temperature": 0,
                                                    "ignore_eos": True, "cache_prompt": False, "lora": lora,
                                                    "return_tokens": True, "seed": 0})
        r.raise_for_status()
        body = r.json()
        return body["tokens"], body["timings"]["predicted_n"]

    rates, last = [], []
    with ThreadPoolExecutor(len(prompt_sets[0])) as pool:
        for prompts in prompt_sets:
            t0 = time.perf_counter()
            outs = list(pool.map(one, enumerate(prompts)))
            wall = time.perf_counter() - t0
            rates.append(sum(n for _, n in outs) / wall)
            last = [toks for toks, _ in outs]
    return statistics.median(rates[1:]), last


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    same = total = 0
    for x, y in zip(a, b):
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        same, total = same + n, total + len(x)
    return same / total if total else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="requests in one batch (llama-server: slots)")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--weights", default="auto", help="sglite's weight format (default: the machine's plan)")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    args = ap.parse_args(argv)
    converter = None
    exes = None
    if not args.skip_llamacpp:
        exes = find_binaries(args.llamacpp_bin)
        found = sorted(args.llamacpp_bin.parent.glob("src/*/llama.cpp/convert_lora_to_gguf.py"))
        if not found:
            raise SystemExit(f"error: convert_lora_to_gguf.py not found under {args.llamacpp_bin.parent / 'src'}; "
                             "run bash bench/build_llamacpp.sh")
        converter = found[-1]

    import torch

    from sglite.runtime.engine import Engine
    from sglite.runtime.model_source import resolve_model_path

    torch.set_num_threads(args.threads)
    gguf = resolve_model_path(args.model)
    info = machine_info()
    print(f"CPU: {info['cpu']}\nCPU flags: {info['flags']}\ntorch: {info['torch']}\nmodel: {gguf.name}\n"
          f"batch {args.batch} x {args.new_tokens} new tokens, adapters of rank {args.rank} on all 7 projections, "
          f"threads {args.threads}")
    n = max(COUNTS)
    with tempfile.TemporaryDirectory(prefix="sglite-lora-bench-") as tmp:
        print("making adapters ...", file=sys.stderr, flush=True)
        folders, files = make_adapters(gguf, Path(tmp), n, args.rank, converter)
        engine = Engine(str(gguf), weights=args.weights, num_threads=args.threads,
                        lora_paths={f"lora{i}": f for i, f in enumerate(folders)}, max_loras_per_batch=n,
                        max_running_requests=max(args.batch, 8))
        print(f"sglite weights: {engine.model.net.plan}", flush=True)
        prompt_sets = batches(engine.tokenizer, args.batch, args.reps)
        rows = {}
        try:
            for k in COUNTS:
                print(f"sglite: {k} adapters ...", file=sys.stderr, flush=True)
                rows[k] = [*ours(engine, prompt_sets, k, args.new_tokens)]
        finally:
            engine.shutdown()
        if exes:
            server = LlamaServer(exes["llama-server"], gguf, args.threads, PROMPT_TOKENS + args.new_tokens + 16)
            server.cmd[server.cmd.index("-np") + 1] = str(args.batch)
            server.cmd[server.cmd.index("-c") + 1] = str(args.batch * (PROMPT_TOKENS + args.new_tokens + 16))
            for f in files:
                server.cmd += ["--lora", str(f)]
            server.cmd += ["--lora-init-without-apply"]
            with server:
                for k in COUNTS:
                    print(f"llama.cpp: {k} adapters ...", file=sys.stderr, flush=True)
                    rows[k] += [*theirs(server, prompt_sets, k, len(files), args.new_tokens)]

    print("\n| adapters in the batch | llama.cpp tok/s | sglite tok/s | sglite vs llama.cpp | sglite vs its base "
          "| llama.cpp vs its base | agree |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k in COUNTS:
        r = rows[k]
        ours_rate, theirs_rate = r[0], (r[2] if len(r) > 2 else None)
        agree = f"{agreement(r[1], r[3]):.0%}" if len(r) > 2 else "–"
        print(f"| {k or 'none (base)'} | {fmt(theirs_rate)} | {fmt(ours_rate)} | {ratio(ours_rate, theirs_rate)} "
              f"| {ours_rate / rows[0][0]:.2f}x | "
              f"{(theirs_rate / rows[0][2]) if theirs_rate else 0:.2f}x | {agree} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
