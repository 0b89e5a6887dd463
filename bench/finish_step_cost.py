"""What the finishing measures (unique keys, generation caps, DRY, closing at the budget) cost per
constrained decode step: the same 32 prompts decoded under the same JSON schema with the measures off and as
shipped, batch 32, jump-forward off.

    python bench/finish_step_cost.py [--batch 32] [--tokens 128] [--rounds 4] [--threads N]

"off" compiles the schema without `unique_keys` and caps and sends `dry_multiplier: 0` and `close_at_budget:
false`; "shipped" is the engine's own defaults (unique keys, GenerationCaps, its JSON DRY default, closing at the
budget, whose check runs in a request's last 64 tokens). Each mode has its own
Engine (so its compiled grammar and masks stay cached); after one cold run each, the modes alternate for --rounds
rounds so drift in machine load hits both alike. Only decode steps (no prefill in the batch) are timed
(bench/constrained_step.py's StepTimer). The outputs differ between the modes (that is the measures' point), so
the grammar states visited differ too; the medians compare steps, not identical token paths. The target is
shipped at most 1.05x off."""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from constrained_step import SCHEMA, StepTimer, load_with_prompts  # noqa: E402


def measures_off(timer: StepTimer) -> None:
    """Makes `timer`'s engine compile JSON schemas without unique keys or caps (its other options unchanged)."""
    compiler = timer.engine.core.grammar._get_compiler()
    plain = compiler.compile_json_schema
    compiler.compile_json_schema = lambda *a, **k: plain(*a, **{**k, "unique_keys": False, "caps": None})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=4, help="alternating warm rounds of each mode")
    args = ap.parse_args()
    import torch

    model, prompts = load_with_prompts(args.batch, args.threads)
    base = {"temperature": 0, "max_new_tokens": args.tokens, "ignore_eos": True, "json_schema": SCHEMA}
    modes = {"off": {**base, "dry_multiplier": 0.0, "close_at_budget": False}, "shipped": base}
    timers = {m: StepTimer(model, args.batch, "auto") for m in modes}
    measures_off(timers["off"])
    cold = {m: timers[m].run(prompts, p) for m, p in modes.items()}
    warm: dict[str, list[float]] = {m: [] for m in modes}
    per_round: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for name, params in modes.items():
            times = timers[name].run(prompts, params)
            warm[name].extend(times)
            per_round[name].append(statistics.median(times))
    for t in timers.values():
        t.engine.shutdown()
    print(f"JSON-schema decode step at batch {args.batch}, {args.tokens} tokens per request, jump-forward off "
          f"(torch threads: {torch.get_num_threads()})")
    print("| measures | cold: steps | median ms | warm: steps | median ms | per-round medians ms |")
    print("|---|---:|---:|---:|---:|---|")
    for name in modes:
        rounds = ", ".join(f"{m * 1e3:.1f}" for m in per_round[name])
        print(f"| {name} | {len(cold[name])} | {statistics.median(cold[name]) * 1e3:.1f} | {len(warm[name])} "
              f"| {statistics.median(warm[name]) * 1e3:.1f} | {rounds} |")
    ratios = [s / o for s, o in zip(per_round["shipped"], per_round["off"])]
    print(f"\nshipped / off (median step): {statistics.median(warm['shipped']) / statistics.median(warm['off']):.3f}x "
          f"warm; per round {', '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f}x); "
          f"{statistics.median(cold['shipped']) / statistics.median(cold['off']):.3f}x cold (target <= 1.05x)")


if __name__ == "__main__":
    main()
