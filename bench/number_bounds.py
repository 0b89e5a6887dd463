"""Integer schemas with huge bounds (`maximum: 10**1000`), model-free through the SmolLM2 tokenizer: compile time
(GrammarCompiler with its default budget, first mask included) and the compile's peak memory, one fresh
process per schema so that the peak is the schema's own. A refused compile prints its error's first words.

    python bench/number_bounds.py [--digits 18 100 1000 5000]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _schemas(digits: int) -> dict[str, dict]:
    b = 10 ** digits
    return {"maximum": {"type": "integer", "maximum": b},
            "min,max": {"type": "integer", "minimum": -b, "maximum": b + 12345},
            "exclusiveMaximum": {"type": "integer", "exclusiveMaximum": -b + 7},
            "multipleOf 7": {"type": "integer", "maximum": b, "multipleOf": 7},
            "number maximum": {"type": "number", "maximum": b}}


def _child(digits: int, name: str) -> None:
    from sglite.runtime.constrained import GrammarCompiler
    from sglite.runtime.tokenizer import load_tokenizer
    compiler = GrammarCompiler(load_tokenizer())
    compiler.compile_json_schema({"type": "integer"}).matcher().allowed_mask()     # warm the token index
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    try:
        compiler.compile_json_schema(_schemas(digits)[name]).matcher().allowed_mask()
        outcome = "compiled"
    except Exception as e:   # noqa: BLE001 - the bench prints what a refusal says
        outcome = f"refused: {type(e).__name__}: {str(e)[:60]}"
    took = time.perf_counter() - t
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    print(json.dumps({"s": took, "mb": grown, "outcome": outcome}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--digits", type=int, nargs="+", default=[18, 100, 1000, 5000])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(int(args.child[0]), args.child[1])
        return
    print("| bound digits | schema | compile s | peak MB above the warm compiler | outcome |\n|---|---|---|---|---|")
    for digits in args.digits:
        for name in _schemas(digits):
            out = subprocess.run([sys.executable, __file__, "--child", str(digits), name], capture_output=True,
                                 check=False, text=True, timeout=120)
            if out.returncode:
                print(f"| {digits} | {name} | - | - | crashed: {out.stderr.strip().splitlines()[-1][:80]} |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {digits} | {name} | {r['s']:.3f} | {r['mb']:.0f} | {r['outcome']} |")


if __name__ == "__main__":
    main()
