"""sglite beside llama.cpp on models of the sizes users run (bench/sized_models.py builds them): the same GGUF file,
the same threads, the same run.

    python bench/sized_models.py --models llama-1b,llama-3b        # once (cached)
    python bench/sized_speed.py --models llama-1b,llama-3b [--types Q4_K_M] [--threads 2] [--weights auto]

Per file, in one table (tokens per second unless said):
- decode at batch 1 (a 64-token prompt, 64 new tokens; llama-bench tg64), prefill of 512 and 4,096 tokens
  (llama-bench pp512 / pp4096; ours: the first token's latency of a fresh prompt, prefix cache flushed), decode
  at 4,096 tokens of context (llama-bench tg32 -d 4096; ours: 32 tokens after a 4,096-token prompt);
- batch-8 throughput: 8 prompts of 64 tokens, 64 new tokens each, at once (llama-server with 8 slots and 8
  requests in flight; ours: one Engine.generate of the 8), completion tokens over wall time;
- load seconds (ours: Engine(); llama.cpp: llama-server's start until /health answers) and peak resident memory
  (ours: the child process's ru_maxrss at the end of its run; llama.cpp: llama-bench's, by /usr/bin/time);
- the bandwidth limit of decode at batch 1: bytes of weights read per token (ours: the layers', embedding row
  and head's nbytes; llama.cpp: the file's tensor bytes) over this machine's memory bandwidth (a 1 GB copy with
  the same threads), and the share of it each figure reaches.

Each sglite measurement runs in its own process (a clean memory figure); greedy, ignore_eos, random token ids."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from sized_models import MODELS, gguf_path  # noqa: E402
from vs_llamacpp import DEFAULT_BIN_DIR, LlamaServer, machine_info  # noqa: E402

CHILD = r'''
import json, random, resource, sys, time
import torch
opts = json.loads(sys.argv[2])
torch.set_num_threads(opts["threads"])
from sglite.runtime.engine import Engine
t0 = time.perf_counter()
e = Engine(sys.argv[1], num_threads=opts["threads"], weights=opts["weights"], max_total_tokens=8 * 256 + 4200,
           max_running_requests=8)
load = time.perf_counter() - t0
net = e.model.net
rng = random.Random(0)
ids = lambda n: [rng.randrange(1000, 40000) for _ in range(n)]
SP = lambda n: {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}
def decode(prompt, n):
    m = e.generate(input_ids=prompt, sampling_params=SP(n))["meta_info"]
    e.flush_cache()
    return (n - 1) / (m["e2e_latency"] - m["ttft"])
def prefill(n):
    t = e.generate(input_ids=ids(n), sampling_params=SP(1))["meta_info"]["ttft"]
    e.flush_cache()
    return n / t
decode(ids(64), 8); prefill(512)                            # warm-up: kernels, caches
out = {"load_s": load, "plan": str(net.plan)}
out["tg"] = max(decode(ids(64), 64) for _ in range(2))
out["pp512"] = max(prefill(512) for _ in range(2))
out["pp4096"] = prefill(4096)
out["tg@4k"] = decode(ids(4096), 32)
t0 = time.perf_counter()
outs = e.generate(input_ids=[ids(64) for _ in range(8)], sampling_params=SP(64))
out["batch8"] = sum(o["meta_info"]["completion_tokens"] for o in outs) / (time.perf_counter() - t0)
def nbytes(x):
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else getattr(x, "nbytes", 0)
layers = sum(nbytes(getattr(L, f)) for L in net.layers for f in ("qkv", "o", "gate_up", "down"))
head = nbytes(net.head.approx) if hasattr(net.head, "approx") else nbytes(net.head)
small = lambda layer: getattr(layer, "small", layer)
decode_layers = sum(nbytes(small(getattr(L, f))) for L in net.layers for f in ("qkv", "o", "gate_up", "down"))
out["bytes_per_token"] = decode_layers + nbytes(small(getattr(net.head, "approx", net.head)))
out["weights_bytes"] = layers + head + nbytes(net.embed)
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
e.shutdown()
print("RESULT " + json.dumps(out))
'''


def ours(path: Path, threads: int, weights: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps({"threads": threads, "weights": weights})],
                          capture_output=True, text=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"sglite run on {path.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(line[7:])


def llama_bench(exe: Path, path: Path, threads: int) -> dict:
    """tg64, pp512, pp4096 and tg32 at depth 4096, and llama-bench's peak RSS (the largest of its runs)."""
    out, rss = {}, 0
    for args, key in ((["-p", "512", "-n", "64", "-r", "2"], None), (["-p", "4096", "-n", "0", "-r", "1"], None),
                      (["-p", "0", "-n", "32", "-d", "4096", "-r", "1"], "tg@4k")):
        done = subprocess.run(["/usr/bin/time", "-v", str(exe), "-m", str(path), "-t", str(threads), "-o", "json",
                               *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"llama-bench failed: {done.stderr[-2000:]}")
        for r in json.loads(done.stdout):
            name = key or (f"pp{r['n_prompt']}" if r["n_prompt"] else "tg")
            out[name] = r["avg_ts"]
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
        rss = max(rss, int(m.group(1)) * 1024 if m else 0)
    out["peak_rss"] = rss
    return out


def llama_server(exe: Path, path: Path, threads: int) -> dict:
    """Load seconds (start to /health) and batch-8 throughput on llama-server."""
    import random

    t0 = time.perf_counter()
    with LlamaServer(exe, path, threads, 256) as server:
        load = time.perf_counter() - t0
        rng = random.Random(0)
        prompts = [[rng.randrange(1000, 40000) for _ in range(64)] for _ in range(8)]

        def one(p):
            r = server.client.post("/completion", json={"prompt": p, "n_predict": 64, "temperature": 0,
                                                        "ignore_eos": True, "cache_prompt": False})
            r.raise_for_status()
            return r.json()["tokens_predicted"]

        one(prompts[0])                                   # warm-up
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            n = sum(pool.map(one, prompts))
        return {"load_s": load, "batch8": n / (time.perf_counter() - t0)}


def bandwidth(threads: int) -> float:
    """Bytes per second of a 1 GB copy (read + write counted) with `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    a = torch.ones(256 << 20, dtype=torch.float32)
    b = torch.empty_like(a)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        best = max(best, 2 * a.numel() * 4 / (time.perf_counter() - t0))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama-1b", help=f"comma list of {list(MODELS)}")
    ap.add_argument("--types", default="Q4_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weights", default="auto", help="sglite's Engine(weights=...)")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    ap.add_argument("--skip-llamacpp", action="store_true")
    args = ap.parse_args(argv)
    files = [(name, t, gguf_path(name, t)) for name in args.models.split(",") for t in args.types.split(",")]
    missing = [str(p) for _, _, p in files if not p.exists()]
    if missing:
        ap.error(f"build them first (python bench/sized_models.py): {', '.join(missing)}")
    info = machine_info()
    bw = bandwidth(args.threads)
    print(f"machine: {info.get('cpu')}; flags {info.get('flags')}; {args.threads} threads; memory bandwidth "
          f"{bw / 1e9:.1f} GB/s (copy); load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for name, t, path in files:
        print(f"{name} {t}: sglite ...", file=sys.stderr, flush=True)
        a = ours(path, args.threads, args.weights)
        b = {}
        if not args.skip_llamacpp:
            print(f"{name} {t}: llama.cpp ...", file=sys.stderr, flush=True)
            b = {**llama_bench(args.llamacpp_bin / "llama-bench", path, args.threads),
                 **llama_server(args.llamacpp_bin / "llama-server", path, args.threads)}
        rows.append((name, t, path, a, b))
    print("\n| model | metric | sglite | llama.cpp | ratio |\n|---|---|---:|---:|---:|")
    for name, t, path, a, b in rows:
        size = path.stat().st_size
        for key, label in (("tg", "decode b1 tok/s"), ("pp512", "prefill 512 tok/s"), ("pp4096", "prefill 4096 tok/s"),
                           ("tg@4k", "decode at 4k ctx tok/s"), ("batch8", "batch-8 tok/s"), ("load_s", "load s")):
            x, y = a.get(key), b.get(key)
            ratio = "" if x is None or y is None else f"{(x / y if key != 'load_s' else y / x):.2f}x"
            print(f"| {name} {t} | {label} | {x:.1f} | {'' if y is None else f'{y:.1f}'} | {ratio} |")
        their_rss = f"{b['peak_rss'] / 1e9:.2f}" if b else ""
        print(f"| {name} {t} | peak RSS GB (file {size / 1e9:.2f}) | {a['peak_rss'] / 1e9:.2f} | {their_rss} | |")
        lim_ours = bw / 2 / a["bytes_per_token"]          # reads only: half the copy's traffic per byte
        lim_file = bw / 2 / size
        print(f"| {name} {t} | decode limit tok/s (bytes/token) | {lim_ours:.1f} ({a['bytes_per_token'] / 1e9:.2f} GB)"
              f" | {lim_file:.1f} ({size / 1e9:.2f} GB) | |")
        their_share = f"{b['tg'] / lim_file:.0%}" if b else ""
        print(f"| {name} {t} | decode b1 share of its limit | {a['tg'] / lim_ours:.0%} | {their_share} | |")
        print(f"| {name} {t} | plan | {a['plan']} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
