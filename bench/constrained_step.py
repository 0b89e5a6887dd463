"""Cost of grammar masks per decode step at batch 32 (real SmolLM2-135M, greedy): the same 32 prompts decoded
with no constraint and with a JSON schema (jump-forward off, so every step is one token per request).

    python bench/constrained_step.py [--batch 32] [--tokens 48] [--threads N]

A step is schedule -> forward -> masks + sampling -> bookkeeping; only steps with no prefill in them count.
"cold" is the schema's first run on a new engine (masks computed on first visit), "warm" the runs after it. The
target is a constrained step at most 1.05x an unconstrained one."""
from __future__ import annotations

import argparse
import statistics
import time

SCHEMA = {"type": "array", "minItems": 20, "items": {
    "type": "object", "additionalProperties": False, "required": ["name", "city", "age", "tags", "member"],
    "properties": {"name": {"type": "string", "maxLength": 30}, "city": {"type": "string"},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "email": {"type": "string", "format": "email"},
                   "tags": {"type": "array", "items": {"enum": ["new", "vip", "late", "local"]}, "maxItems": 3},
                   "member": {"type": "boolean"}}}}


class StepTimer:
    """An engine whose decode-only steps are timed (wall clock of schedule -> forward -> process)."""

    def __init__(self, model, batch: int, overlap: str):
        from sglite.runtime.engine import Engine

        self.engine = Engine(model, max_running_requests=batch, enable_jump_forward=False, background=False,
                             grammar_mask_overlap=overlap)
        self.times: list[float] = []
        core = self.engine.core
        schedule, step = core.scheduler.schedule, core.step
        last = {}

        def recording_schedule():
            last["batch"] = b = schedule()
            return b

        def timed_step():
            t0 = time.perf_counter()
            chunks = step()
            b = last.get("batch")
            if b is not None and b.num_prefill == 0:
                self.times.append(time.perf_counter() - t0)
            return chunks
        core.scheduler.schedule = recording_schedule
        core.step = timed_step

    def run(self, prompts: list[str], params: dict) -> list[float]:
        """Step times of one generate call over `prompts`."""
        self.times = []
        self.engine.generate(prompts, params)
        self.engine.flush_cache()
        return self.times


def load_with_prompts(batch: int, threads: int | None):
    """(the default model, `batch` chat prompts asking for lists of club members as JSON), with torch set to
    `threads` threads when given."""
    import torch

    from sglite.runtime.model import load_model

    if threads:
        torch.set_num_threads(threads)
    model = load_model()
    tok = model.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"List {20 + i} members of club {i} as JSON "
                                                                     f"objects with name, city, age, tags."}])
               for i in range(batch)]
    return model, prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--mask-overlap", default="auto", choices=["auto", "on", "off"],
                    help="build masks during the forward pass (EngineConfig.grammar_mask_overlap)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of each mode; medians reported")
    args = ap.parse_args()
    import torch

    model, prompts = load_with_prompts(args.batch, args.threads)
    base = {"temperature": 0, "max_new_tokens": args.tokens, "ignore_eos": True}
    modes = {"unconstrained": base, "json_schema": {**base, "json_schema": SCHEMA}}
    timers = {m: StepTimer(model, args.batch, args.mask_overlap) for m in modes}
    cold = {m: timers[m].run(prompts, p) for m, p in modes.items()}   # first sight of the schema
    warm = {m: [] for m in modes}
    for _ in range(args.rounds):   # alternate, so drift in machine load hits both modes alike
        for name, params in modes.items():
            warm[name].extend(timers[name].run(prompts, params))
    for t in timers.values():
        t.engine.shutdown()
    print(f"decode step at batch {args.batch}, {args.tokens} tokens per request, jump-forward off "
          f"(torch threads: {torch.get_num_threads()}, mask overlap: {args.mask_overlap}, "
          f"{'on' if timers['json_schema'].engine.core.masks.overlapping() else 'off'} here)")
    print("| mode | cold: steps | median ms | warm: steps | median ms | mean ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in modes:
        print(f"| {name} | {len(cold[name])} | {statistics.median(cold[name]) * 1e3:.1f} | {len(warm[name])} "
              f"| {statistics.median(warm[name]) * 1e3:.1f} | {statistics.fmean(warm[name]) * 1e3:.1f} |")
    ratio = {k: statistics.median(d["json_schema"]) / statistics.median(d["unconstrained"])
             for k, d in (("cold", cold), ("warm", warm))}
    print(f"\nconstrained / unconstrained (median step): {ratio['warm']:.3f}x warm, {ratio['cold']:.3f}x on the "
          f"schema's first run (target <= 1.05x)")

if __name__ == "__main__":
    main()
