"""Speculative decoding (n-gram drafts) off vs on, in one run, on the default model:

- the main job at batch 1: the bundled reports one at a time through the example extraction program;
- the main job with every report in one run_batch;
- free-form chat at batch 1, where there is little to copy.

For each: wall time, completion tokens per decode pass (passes in which a request sampled or verified tokens),
and whether the outputs are identical with speculation on and off (greedy: they must be). The two sides take
turns for --rounds rounds (a fresh engine each), and each time is the median of its rounds: on a shared
machine, a burst of other work during one side's only run decided the ratio.

    python bench/speculative.py [--rounds 3] [--limit-b1 20] [--limit 20] [--draft-tokens 6] [--threads N]
                                [--weights auto]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from vs_llamacpp import load_example   # bench/ is on sys.path when this script runs

ROOT = Path(__file__).resolve().parent.parent
CHAT_PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works to a ten-year-old.",
    "List five ideas for a weekend trip near the mountains, with one sentence each.",
    "What are the pros and cons of working from home?",
]


def run_side(example, docs: list[dict], b1_docs: list[dict], options: dict[str, Any]) -> dict[str, Any]:
    import sglite as sgl
    from sglite.runtime.engine import Engine

    engine = Engine(**options)
    runtime = sgl.Runtime(engine=engine)
    out: dict[str, Any] = {}
    try:
        engine.generate("warm up", {"max_new_tokens": 4})

        def b1(texts: list[str], program, var: str) -> tuple[float, list[str], int, int]:
            engine.flush_cache()
            t0, outs, tokens, passes = time.perf_counter(), [], 0, 0
            for text in texts:
                state = program.run(text, backend=runtime)
                meta = state.get_meta_info(var)
                outs.append(state[var])
                tokens += meta["completion_tokens"] - meta["forced_tokens"]
                passes += meta["decode_passes"]
            return time.perf_counter() - t0, outs, tokens, passes

        @sgl.function
        def chat(s, prompt):
            s += sgl.user(prompt)
            s += sgl.assistant(sgl.gen("out", max_tokens=128, temperature=0))

        out["b1"] = b1([d["text"] for d in b1_docs], example.extract_report, "record")
        out["chat"] = b1(CHAT_PROMPTS, chat, "out")
        engine.flush_cache()
        job = example.run_job(docs, runtime, progress_bar=False)
        out["batch"] = (job["elapsed_s"], [r["record"] for r in job["results"]], None, None)
        out["stats"] = engine.get_stats()
    finally:
        engine.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="turns each side takes; times are medians")
    ap.add_argument("--limit", type=int, default=20, help="reports in the batch job")
    ap.add_argument("--limit-b1", type=int, default=20,
                    help="reports run one at a time (default: all of the main job's)")
    ap.add_argument("--draft-tokens", type=int, default=6)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--weights", default="auto")
    args = ap.parse_args(argv)

    example = load_example()
    docs = example.load_reports(ROOT / "examples" / "data" / "reports.jsonl", args.limit)
    base = {"weights": args.weights}
    if args.threads:
        base["num_threads"] = args.threads
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for r in range(args.rounds):
        for name, spec in (("off", {}), ("on", {"speculative_algorithm": "ngram",
                                                 "speculative_num_draft_tokens": args.draft_tokens})):
            print(f"round {r + 1}/{args.rounds}: speculation {name} ...", file=sys.stderr)
            runs[name].append(run_side(example, docs, docs[:args.limit_b1], {**base, **spec}))
    sides = {name: {key: (statistics.median(run[key][0] for run in rs), *rs[-1][key][1:])
                    for key in ("b1", "chat", "batch")} for name, rs in runs.items()}
    sides["on"]["stats"] = runs["on"][-1]["stats"]
    same_rounds = all(run[key][1] == rs[0][key][1] for rs in runs.values() for run in rs for key in ("b1", "chat"))

    off, on = sides["off"], sides["on"]
    rows = []
    for key, label in (("b1", f"main job, batch 1 ({args.limit_b1} reports)"),
                       ("batch", f"main job, one run_batch ({len(docs)} reports)"),
                       ("chat", f"free-form chat, batch 1 ({len(CHAT_PROMPTS)} prompts)")):
        t_off, o_off, tok_off, p_off = off[key]
        t_on, o_on, tok_on, p_on = on[key]
        tpp = (f"{tok_off / p_off:.2f}" if p_off else "-", f"{tok_on / p_on:.2f}" if p_on else "-")
        rows.append((label, f"{t_off:.1f}", f"{t_on:.1f}", f"{t_off / t_on:.2f}x", *tpp,
                     "yes" if o_off == o_on else "NO"))
    head = ("", "off s", "on s", "speed-up", "tok/pass off", "tok/pass on", "identical")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    st = on["stats"]
    print(f"\ndraft tokens proposed {st['spec_draft_tokens']}, accepted {st['spec_accepted_tokens']} "
          f"({100 * st['spec_acceptance_rate']:.0f}%); one more row in a step costs {st['spec_row_cost']:.2f} of a "
          "one-row step (learned, last round); tokens per pass count sampled tokens only (jump-forward's forced tokens "
          f"excluded); batch-1 outputs the same in every round: {'yes' if same_rounds else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
