"""How fast speculative decoding could make the main job on this machine: the bound any drafter meets.

`bench/speculative.py` measures the n-gram drafter. This asks what a perfect drafter would reach: one that
knows every token the model will emit. A first run decodes plainly (no drafts) and records each request's greedy
output; then, for each draft length K, the same job runs with every decoding request drafting the next K tokens
of its own recorded output (cut, as always, where its grammar forbids), so every draft token is accepted and a
pass emits up to K + 1 tokens. No n-gram drafter can do better at that K: its drafts are at best as long and
as right. The outputs must come out identical to the plain run (a check of verification itself).

Each run's steps are timed in the engine and split into prefill steps, plain decode steps and verify steps, so
the table also shows the wall time that drafting cannot touch (prefill, and everything outside the steps) and
"free rows": the plain run's wall time if each decode pass cost what a one-draft-free pass costs, with the
perfect drafter's pass count, i.e. if verifying drafts cost nothing at all.

    python bench/speculative_bound.py [--limit 20] [--drafts 1,2,3,4,6] [--batch] [--threads N] [--weights auto]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from vs_llamacpp import load_example   # bench/ is on sys.path when this script runs

ROOT = Path(__file__).resolve().parent.parent


class StepClock:
    """Wraps an engine core's step(): seconds and passes by kind (prefill, decode, verify)."""

    def __init__(self, core):
        self.core, self.seconds, self.passes = core, defaultdict(float), defaultdict(int)
        inner_forward, inner_step = core.runner.forward, core.step
        self.kind = ""

        def forward(batch, table):
            self.kind = ("prefill" if batch.num_prefill else
                         "verify" if any(r.spec.draft for r in batch.reqs) else "decode")
            return inner_forward(batch, table)

        def step():
            self.kind = ""
            t0 = time.perf_counter()
            out = inner_step()
            if self.kind:
                self.seconds[self.kind] += time.perf_counter() - t0
                self.passes[self.kind] += 1
            return out

        core.runner.forward, core.step = forward, step

    def reset(self) -> None:
        self.seconds.clear()
        self.passes.clear()


def install_oracle(drafter, oracle: dict[tuple[int, ...], list[int]], k: int | None) -> None:
    """k None: no drafts (the plain run), recording each finished request's output into `oracle`; else every
    running request drafts the next k tokens of its recorded output."""
    from sglite.runtime.engine.speculative import _grammar_prefix

    def propose_all(reqs):
        for r in reqs:
            r.spec.draft = []
            if k is None or r.finished:
                continue
            out = oracle.get(tuple(r.origin_input_ids), [])
            n = len(r.output_ids)
            room = min(k, r.remaining_new_tokens - 1)
            if room <= 0 or out[:n] != r.output_ids:
                continue
            draft = out[n:n + room]
            r.spec.draft = _grammar_prefix(r, draft) if r.matcher is not None else draft

    def on_finished(r):
        if k is None:
            oracle[tuple(r.origin_input_ids)] = list(r.output_ids)

    def feedback(r, proposed, accepted):
        drafter.proposed += proposed
        drafter.accepted += accepted

    drafter.propose_all, drafter.on_finished, drafter.feedback = propose_all, on_finished, feedback


def run(example, engine, runtime, clock, docs, batch: bool) -> tuple[float, list]:
    engine.flush_cache()
    clock.reset()
    t0 = time.perf_counter()
    if batch:
        outs = [r["raw"] for r in example.run_job(docs, runtime, progress_bar=False)["results"]]
    else:
        outs = [example.extract_report.run(d["text"], backend=runtime)["record"] for d in docs]
    return time.perf_counter() - t0, outs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=20, help="reports")
    ap.add_argument("--drafts", default="1,2,3,4,6", help="draft lengths K to try")
    ap.add_argument("--batch", action="store_true", help="all reports in one run_batch instead of one at a time")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--weights", default="auto")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.drafts.split(",")]

    import sglite as sgl
    from sglite.runtime.engine import Engine

    example = load_example()
    docs = example.load_reports(ROOT / "examples" / "data" / "reports.jsonl", args.limit)
    options: dict[str, Any] = {"weights": args.weights, "speculative_algorithm": "ngram",
                               "speculative_num_draft_tokens": max(ks)}
    if args.threads:
        options["num_threads"] = args.threads
    engine = Engine(**options)
    runtime = sgl.Runtime(engine=engine)
    clock = StepClock(engine.core)
    oracle: dict[tuple[int, ...], list[int]] = {}
    rows = []
    try:
        engine.generate("warm up", {"max_new_tokens": 4})
        install_oracle(engine.core.drafter, oracle, None)
        wall_off, outs_off = run(example, engine, runtime, clock, docs, args.batch)
        sec, passes = dict(clock.seconds), dict(clock.passes)
        one_row = sec.get("decode", 0.0) / max(passes.get("decode", 0), 1)    # seconds a plain decode step
        untouched = wall_off - sec.get("decode", 0.0)                         # prefill + outside the steps
        rows.append(("plain (off)", wall_off, "1.00x", passes.get("decode", 0), f"{one_row * 1e3:.1f}", "-",
                     f"{untouched:.1f}", "-", "yes"))
        for k in ks:
            install_oracle(engine.core.drafter, oracle, k)
            wall, outs = run(example, engine, runtime, clock, docs, args.batch)
            p = clock.passes.get("decode", 0) + clock.passes.get("verify", 0)
            v = clock.passes.get("verify", 0)
            per_verify = clock.seconds.get("verify", 0.0) / v if v else 0.0
            outside = wall - clock.seconds.get("decode", 0.0) - clock.seconds.get("verify", 0.0)
            free = untouched + p * one_row
            rows.append((f"perfect drafts, K={k}", wall, f"{wall_off / wall:.2f}x", p, "-",
                         f"{per_verify * 1e3:.1f}" if v else "-", f"{outside:.1f}", f"{wall_off / free:.2f}x",
                         "yes" if outs == outs_off else "NO"))
    finally:
        engine.shutdown()

    mode = f"one run_batch of {len(docs)} reports" if args.batch else f"{len(docs)} reports at batch 1"
    print(f"main job, {mode}; {sec.get('prefill', 0.0):.1f} s of the plain run in {passes.get('prefill', 0)} "
          f"prefill steps, {sec.get('decode', 0.0):.1f} s in {passes.get('decode', 0)} decode steps")
    head = ("", "wall s", "speed-up", "decode passes", "ms/plain pass", "ms/verify pass", "s outside decode",
            "bound if rows free", "identical")
    table = [head] + [tuple(c if isinstance(c, str) else (f"{c:.1f}" if isinstance(c, float) else str(c))
                            for c in r) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
