"""A decode step beside a grammar compile on another thread: the compile is pure Python and holds the GIL, and the
engine's loop takes the GIL back after each torch op, so it waits for the compile's switch interval each time.
Per scenario, the time per generated token of one plain request (tiny random-weight model or SmolLM2, 1 thread),
alone and beside a thread that compiles heavy JSON schemas back to back, with the compile's switch interval left
at Python's 5 ms (CompileBudget(switch_interval_s=None), as before) and lowered (the default, 0.5 ms); and the compiles'
own seconds beside the decode, which the lower interval costs a little. Scenarios interleave in rounds (the
machine's speed varies); the table gives medians.

    python bench/gil_compile.py [--model tiny|real] [--rounds 3] [--tokens 32] [--compiles 2]
"""
from __future__ import annotations

import argparse
import random
import statistics
import threading
import time


def _schema(rnd: random.Random) -> dict:
    """A schema no cache has seen: enums of fresh strings and a number range with a step."""
    props = {f"k{j}": {"enum": [f"v{rnd.random():.12f}" for _ in range(40)]} for j in range(12)}
    props["n"] = {"type": "number", "minimum": rnd.randint(0, 99), "maximum": 10 ** 30, "multipleOf": 0.5}
    return {"type": "object", "properties": props}


class Compiles:
    """Compiles `count` fresh schemas on a thread; records each compile's seconds."""

    def __init__(self, tokenizer, switch_interval_s, count: int, seed: int):
        from sglite.runtime.constrained import GrammarCompiler
        from sglite.runtime.constrained.budget import CompileBudget
        budget = CompileBudget(seconds=60, switch_interval_s=switch_interval_s)
        self.compiler = GrammarCompiler(tokenizer, budget=budget)
        self.compiler.compile_json_schema({"type": "integer"}).matcher().allowed_mask()     # the token index
        self.count, self.seed = count, seed
        self.took: list[float] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        rnd = random.Random(self.seed)
        for _ in range(self.count):
            t = time.perf_counter()
            self.compiler.compile_json_schema(_schema(rnd)).matcher().allowed_mask()
            self.took.append(time.perf_counter() - t)


def _decode_ms(engine, tokens: int, until=None) -> float:
    """ms per generated token of plain requests of `tokens` tokens, one after another (one; or until `until()`)."""
    from sglite.protocol import GenerateRequest, SamplingParams
    params = SamplingParams(max_new_tokens=tokens, ignore_eos=True, temperature=0.0)
    spent, made = 0.0, 0
    while True:
        t = time.perf_counter()
        out = engine.submit(GenerateRequest(text="Count to ten:", params=params))[0].output()
        spent += time.perf_counter() - t
        made += len(out.output_ids)
        if until is None or until():
            return spent / max(made, 1) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tiny", "real"], default="tiny")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--compiles", type=int, default=2)
    args = ap.parse_args()
    import torch
    from sglite.runtime.engine import Engine
    from sglite.runtime.tokenizer import load_tokenizer
    torch.set_num_threads(1)
    if args.model == "tiny":
        from sglite.runtime.testing import load_tiny_model
        model = load_tiny_model(seed=0)
    else:
        from sglite.runtime.model import load_model
        model = load_model()
    tokenizer = load_tokenizer()
    scenarios = {"alone": "none", "beside compiles, 5 ms switch (before)": None,
                 "beside compiles, 0.5 ms switch (now)": 0.0005}
    ms: dict[str, list[float]] = {k: [] for k in scenarios}
    compile_s: dict[str, list[float]] = {k: [] for k in scenarios}
    with Engine(model, max_total_tokens=2048, num_threads=1) as engine:
        _decode_ms(engine, 4)
        for r in range(args.rounds):
            for name, interval in scenarios.items():
                if interval == "none":
                    ms[name].append(_decode_ms(engine, args.tokens))
                    continue
                c = Compiles(tokenizer, interval, args.compiles, seed=r)
                c.thread.start()
                ms[name].append(_decode_ms(engine, args.tokens, until=lambda c=c: not c.thread.is_alive()))
                c.thread.join()
                compile_s[name].append(statistics.mean(c.took))
    print(f"model {args.model}, requests of {args.tokens} tokens, {args.compiles} compiles a round, medians of "
          f"{args.rounds} interleaved rounds\n")
    print("| scenario | ms per token | s per compile beside the decode |\n|---|---|---|")
    for name in scenarios:
        c = f"{statistics.median(compile_s[name]):.2f}" if compile_s[name] else "-"
        print(f"| {name} | {statistics.median(ms[name]):.1f} | {c} |")


if __name__ == "__main__":
    main()
