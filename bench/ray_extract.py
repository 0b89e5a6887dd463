"""Throughput of `sglite extract` on one local engine vs the same job on Ray replicas, same run, same inputs.

    python bench/ray_extract.py                      # 2 copies of the 20 bundled reports, greedy
    python bench/ray_extract.py --copies 4 --rounds 2 --weights int8

The job is `sglite extract`'s: the bundled reports (examples/data/reports.jsonl, each copy with its own ids),
the example's schema (objects closed, as the CLI compiles it) and instructions. Rows:
- local: one Engine (in process) with --threads torch threads;
- local, 1 thread (--one-thread-row): what one replica does alone, for the throughput per replica;
- ray: --replicas replicas on a local Ray cluster of --threads CPUs, each an Engine with threads/replicas
  threads, the documents dispatched in shards (sglite/distributed).
Every engine gets the same KV pool (--max-total-tokens). Model loading is not timed: the clock runs from the first document sent to the last result back. The ratio is
ray's docs/s over local's from the same round. On a shared machine the figures are noisy: use --rounds."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"


def load_job(copies: int, max_tokens: int):
    from sglite.extract.inputs import Document
    from sglite.extract.job import JobSpec
    from sglite.protocol import closed_schema, json_schema_text

    schema = json.loads((DATA / "financial_report.schema.json").read_text())
    instructions = (DATA / "financial_report.prompt.txt").read_text().strip()
    reports = [json.loads(line) for line in (DATA / "reports.jsonl").read_text().splitlines() if line.strip()]
    docs = [Document(f"{r['id']}-{c}", r["text"], f"reports.jsonl:{i + 1}")
            for c in range(copies) for i, r in enumerate(reports)]
    return JobSpec(instructions, schema, json_schema_text(closed_schema(schema)), max_tokens, 0.0), docs


def run_job(spec, docs, backend, runner) -> dict:
    from sglite.extract.job import shared_prefix

    usage0 = backend.usage.as_dict()
    t0 = time.perf_counter()
    prefix = shared_prefix(spec, docs, backend)
    lines = {}
    for line in runner(spec, docs, prefix):
        lines[line["id"] if isinstance(line, dict) else line.id] = line
    elapsed = time.perf_counter() - t0
    usage = {k: v - usage0[k] for k, v in backend.usage.as_dict().items() if k != "cache_hit_rate"}
    valid = sum(isinstance(x, dict) and "error" not in x for x in lines.values())
    return {"docs": len(docs), "valid": valid, "lines": lines, "seconds": elapsed, "docs_per_s": len(docs) / elapsed,
            "tok_per_s": usage["completion_tokens"] / elapsed,
            "hit": usage["cached_tokens"] / usage["prompt_tokens"] if usage["prompt_tokens"] else 0.0}


def bench_local(spec, docs, args, threads: int) -> dict:
    import sglite as sgl
    from sglite.extract.job import run_documents

    with sgl.Runtime(args.model, weights=args.weights, num_threads=threads,
                     max_total_tokens=args.max_total_tokens) as rt:
        run_job(spec, docs[:2], rt, lambda s, d, p: run_documents(s, d, rt, p))   # warm-up (not timed)
        rt.flush_cache()
        return run_job(spec, docs, rt, lambda s, d, p: run_documents(s, d, rt, p))


def bench_ray(spec, docs, args) -> dict:
    import sglite as sgl

    per_replica = max(1, args.threads // args.replicas)
    with sgl.RayRuntime(args.model, replicas=args.replicas, num_threads=per_replica, weights=args.weights,
                        shard_size=args.shard_size, max_total_tokens=args.max_total_tokens) as rt:
        run_job(spec, docs[:2 * args.replicas], rt, rt.run_documents)               # warm-up (not timed)
        rt.flush_cache()
        return run_job(spec, docs, rt, rt.run_documents)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=2, help="copies of the 20 bundled reports (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="local engine threads = Ray CPUs (default 2)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--shard-size", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--one-thread-row", action="store_true",
                    help="also time one local engine with 1 thread: what a single replica does alone")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct")
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--max-total-tokens", type=int, default=32768,
                    help="KV slots per engine, local and each replica alike (the default, 64 x 2048, is "
                         "gigabytes per engine)")
    args = ap.parse_args()

    import ray

    spec, docs = load_job(args.copies, args.max_tokens)
    ray.init(num_cpus=args.threads, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    rows = []
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}: local ...", file=sys.stderr)
            local = bench_local(spec, docs, args, args.threads)
            rows.append((r + 1, f"local, 1 engine x {args.threads} threads", local, local))
            if args.one_thread_row:
                print(f"round {r + 1}: local, 1 thread ...", file=sys.stderr)
                rows.append((r + 1, "local, 1 engine x 1 thread (one replica alone)",
                             bench_local(spec, docs, args, 1), local))
            print(f"round {r + 1}: ray ...", file=sys.stderr)
            rows.append((r + 1, f"ray, {args.replicas} replicas x {max(1, args.threads // args.replicas)} "
                                "thread(s)", bench_ray(spec, docs, args), local))
    finally:
        ray.shutdown()
    print(f"\n{len(docs)} documents ({args.copies} x the bundled reports), weights {args.weights}, "
          f"max_tokens {args.max_tokens}, greedy")
    print("| round | setup | valid | same lines as local | seconds | docs/s | output tok/s | prefix hit | vs local |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, name, m, local in rows:
        vs = "" if m is local else f"{m['docs_per_s'] / local['docs_per_s']:.2f}x"
        same = "" if m is local else f"{sum(m['lines'].get(k) == v for k, v in local['lines'].items())}/{len(docs)}"
        print(f"| {r} | {name} | {m['valid']}/{m['docs']} | {same} | {m['seconds']:.1f} | {m['docs_per_s']:.2f} | "
              f"{m['tok_per_s']:.0f} | {m['hit']:.0%} | {vs} |")


if __name__ == "__main__":
    main()
