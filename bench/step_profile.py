"""Where a batch-1 decode step's time goes: the model's matmuls, attention, the rest of the forward pass, and the
engine around it (scheduling, sampling, output), on the default model and weights.

    python bench/step_profile.py [--tokens 128] [--weights auto] [--threads 2]

Greedy generation of --tokens tokens from an 8-token prompt through Engine.generate, timed three ways in the
same process: the engine's step time (decode phase: e2e - ttft, per token); the forward pass alone; and inside
the forward pass, the wall time of every projection (QKV, O, gate/up, down and the output head) and of every
attention call, by wrapping them with timers (which add ~1 us per call; the table says how many calls). Run it
with SGLITE_FUSED_CPU=0 to see the eager layer ops instead of the fused ones."""
from __future__ import annotations

import argparse
import random
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    from sglite.runtime.engine import Engine

    engine = Engine(weights=args.weights, num_threads=args.threads)
    net = engine.model.net
    rng = random.Random(0)
    passes: list[dict[str, list]] = []     # per forward pass: key -> [seconds, calls]

    class Timed:
        """Calls `fn` under the timer `key` of the current pass (a "forward" call opens a new pass); other
        attributes are fn's (a Linear's dtype, sizes)."""
        def __init__(self, fn, key):
            self.fn, self.key = fn, key

        def __call__(self, *a, **kw):
            if self.key == "forward":
                passes.append({k: [0.0, 0] for k in ("matmuls", "attention", "forward")})
            t = time.perf_counter()
            try:
                return self.fn(*a, **kw)
            finally:
                if passes:
                    passes[-1][self.key][0] += time.perf_counter() - t
                    passes[-1][self.key][1] += 1

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
            setattr(L, name, Timed(getattr(L, name), "matmuls"))
    net.head = Timed(net.head, "matmuls")
    attn = engine.core.runner.attn
    attn.attend = Timed(attn.attend, "attention")
    attn.forward = Timed(attn.forward, "attention")
    net.forward = Timed(net.forward, "forward")
    m = generate()
    steps = m["completion_tokens"] - 1
    decode_s = m["e2e_latency"] - m["ttft"]
    decode = passes[1:]                      # the first pass is the prefill
    per = {k: (sum(p[k][0] for p in decode) / len(decode) * 1e3, decode[0][k][1]) for k in decode[0]}
    fwd = per["forward"][0]
    rows = [("matmuls (QKV, O, gate/up, down, head)", per["matmuls"][0], per["matmuls"][1]),
            ("attention", per["attention"][0], per["attention"][1]),
            ("rest of the forward pass", fwd - per["matmuls"][0] - per["attention"][0], None),
            ("engine around the pass (schedule, sample, output)", decode_s / steps * 1e3 - fwd, None)]
    print(f"weights {net.plan}, {args.threads} threads, fused CPU layer ops: {net.fused_cpu}")
    print(f"decode step (untimed run, best of {args.reps}): {step_ms:.2f} ms = {1e3 / step_ms:.1f} tok/s; "
          f"timed run: {decode_s / steps * 1e3:.2f} ms")
    print()
    print("| part of a batch-1 decode step | ms | share | calls per step |")
    print("|---|---:|---:|---:|")
    total = decode_s / steps * 1e3
    for name, ms, calls in rows:
        print(f"| {name} | {ms:.2f} | {100 * ms / total:.0f}% | {calls if calls is not None else ''} |")
    engine.shutdown()


if __name__ == "__main__":
    main()
