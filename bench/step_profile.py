"""Where a batch-1 decode step's time goes: each class of weight matmul, the output head's approximate pass and
its exact refinement, attention, the rest of the forward pass (norms, rotary, activations, embedding), the
sampler, and the engine around them (scheduling, output), on any model file and weight plan.

    python bench/step_profile.py [--model FILE] [--tokens 128] [--weights auto] [--threads 2]

Greedy generation of --tokens tokens from an 8-token prompt through Engine.generate, timed two ways in the same
process: the engine's step time (decode phase: e2e - ttft, per token, best of --reps untimed runs); then one run
with every projection, the head's parts, every attention call, the forward pass and the sampler wrapped in
timers (each adds ~1 us per call; the table says how many calls). Run it with SGLITE_FUSED_CPU=0 to see the
eager layer ops instead of the fused ones."""
from __future__ import annotations

import argparse
import random
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="a GGUF file or HF folder (default: the bundled SmolLM2)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    from sglite.runtime.engine import Engine

    engine = Engine(args.model, weights=args.weights, num_threads=args.threads)
    net = engine.model.net
    rng = random.Random(0)
    passes: list[dict[str, list]] = []     # per forward pass: key -> [seconds, calls]
    starts: list[float] = []               # when each forward pass began

    class Timed:
        """Calls `fn` under the timer `key` of the current pass (a "forward" call opens a new pass); other
        attributes are fn's (a Linear's dtype, sizes)."""
        def __init__(self, fn, key):
            self.fn, self.key = fn, key

        def __call__(self, *a, **kw):
            t = time.perf_counter()
            if self.key == "forward":
                passes.append({})
                starts.append(t)
            try:
                return self.fn(*a, **kw)
            finally:
                if passes:
                    cell = passes[-1].setdefault(self.key, [0.0, 0])
                    cell[0] += time.perf_counter() - t
                    cell[1] += 1

        def __getattr__(self, name):
            return getattr(self.fn, name)

    def generate() -> dict:
        engine.flush_cache()
        prompt = [rng.randrange(100, net.config.vocab_size - 100) for _ in range(8)]
        return engine.generate(input_ids=[prompt], sampling_params={
            "max_new_tokens": args.tokens, "temperature": 0, "ignore_eos": True})[0]["meta_info"]

    generate()   # warm-up
    plain = [generate() for _ in range(args.reps)]
    step_ms = min((m["e2e_latency"] - m["ttft"]) / (m["completion_tokens"] - 1) for m in plain) * 1e3

    for L in net.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            setattr(L, name, Timed(getattr(L, name), name))
    head = net.head
    if hasattr(head, "approx"):            # RefinedHead: the approximate pass, then the exact top-k
        head.approx = Timed(head.approx, "head_approx")
    net.head = Timed(head, "head")
    attn = engine.core.runner.attn
    attn.attend = Timed(attn.attend, "attention")
    attn.forward = Timed(attn.forward, "attention")
    sampler = engine.core.processor.sampler
    sampler.sample = Timed(sampler.sample, "sampler")
    net.forward = Timed(net.forward, "forward")
    m = generate()
    steps = m["completion_tokens"] - 1
    decode_s = m["e2e_latency"] - m["ttft"]
    step_times = [b - a for a, b in zip(starts[1:], starts[2:])]   # decode pass to decode pass
    decode = passes[1:]                      # the first pass is the prefill; a pass's sampler call follows it
    keys = sorted({k for p in decode for k in p})
    # medians over the steps: on a shared machine a few steps take a time slice's wait
    per = {k: (statistics.median(p.get(k, [0, 0])[0] for p in decode) * 1e3, decode[0].get(k, [0, 0])[1])
           for k in keys}
    z = (0.0, 0)
    total = statistics.median(step_times) * 1e3
    fwd = per["forward"][0]
    approx = per.get("head_approx", z)[0]
    head_ms = per["head"][0]
    layer_mm = sum(per[k][0] for k in ("qkv", "o", "gate_up", "down"))
    rows = [(f"matmul {k}", *per[k]) for k in ("qkv", "o", "gate_up", "down")]
    if "head_approx" in per:
        rows += [("head: approximate pass", approx, per["head_approx"][1]),
                 ("head: top-k and exact refinement", head_ms - approx, None)]
    else:
        rows += [("head", head_ms, per["head"][1])]
    rows += [("attention", *per["attention"]),
             ("rest of the forward pass (embed, norms, rotary, activations)",
              fwd - layer_mm - head_ms - per["attention"][0], None),
             ("sampler", *per["sampler"]),
             ("engine around the pass (schedule, forward batch, output)", total - fwd - per["sampler"][0], None)]
    print(f"model {args.model or 'default'}: weights {net.plan}, {args.threads} threads, "
          f"fused CPU layer ops: {net.fused_cpu}, vocab {net.config.vocab_size}")
    print(f"decode step (untimed run, best of {args.reps}): {step_ms:.2f} ms = {1e3 / step_ms:.1f} tok/s; "
          f"timed run: {decode_s / steps * 1e3:.2f} ms, median step {total:.2f} ms")
    print()
    print("| part of a batch-1 decode step | ms | share | calls per step |")
    print("|---|---:|---:|---:|")
    for name, ms, calls in rows:
        print(f"| {name} | {ms:.3f} | {100 * ms / total:.1f}% | {calls if calls is not None else ''} |")
    engine.shutdown()


if __name__ == "__main__":
    main()
