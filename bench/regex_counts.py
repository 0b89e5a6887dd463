"""Counted repetition, model-free: compile time, memory and byte-DFA states of regexes with large counts
through GrammarCompiler (the real tokenizer, the default compile budget), and the mask time per token of a
greedy walk through each compiled grammar. Each regex compiles in a fresh process (its peak RSS is the memory
figure), so one does not warm another's caches. Times are the thread's CPU time, as MaskBench's are (a busy
machine's wall clock says more about its other work); the compile budget itself is wall time.

    python bench/regex_counts.py [--tokens 40] [--timeout 60] [REGEX ...]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGEXES = ["a{0,5000}", "a{0,20000}", "a{0,100000}", r"[\s\S]{0,100000}", "(a{1,100}){1,100}", "b{0,6000}",
           r"\w{1,50}", r"\w{1,5000}", r"^ID-\d{1,100000}$"]


def one(pattern: str, tokens: int) -> dict:
    """Compile `pattern` in this process and walk `tokens` masks: the figures as a dict."""
    sys.path.insert(0, str(ROOT.parent))
    import numpy as np
    from sglite.runtime.constrained import GrammarCompiler, GrammarError
    from sglite.runtime.tokenizer import load_tokenizer
    tok = load_tokenizer(None)
    gc = GrammarCompiler(tok)
    gc.compile_regex("a")                        # the index and kernels loaded before the clock starts
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.thread_time()
    try:
        g = gc.compile_regex(pattern)
    except GrammarError as e:
        return {"error": str(e)[:90], "s": time.thread_time() - t0}
    s = time.thread_time() - t0
    mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    states = g.ir.nodes[0].dfa.num_states
    m = g.matcher()
    eos = gc.index.eos_token_id
    times = []
    for _ in range(tokens):                      # a greedy walk: the longest allowed token each step
        t1 = time.thread_time()
        mask = m.allowed_mask()
        times.append(time.thread_time() - t1)
        allowed = [t for t in np.flatnonzero(mask).tolist() if gc.index.token_bytes[t] and t != eos]
        if not allowed:
            break
        m.accept_token(max(allowed, key=lambda t: (len(gc.index.token_bytes[t]), -t)))
    return {"s": s, "mb": mb, "states": states, "mask_ms": 1000 * sorted(times)[len(times) // 2] if times else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("regex", nargs="*", default=REGEXES)
    ap.add_argument("--tokens", type=int, default=40, help="masks per regex (median reported)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.regex[0], args.tokens)))
        return
    print(f"{'regex':24} {'compile s':>9} {'MB':>7} {'states':>7} {'mask ms/token':>13}")
    for p in args.regex:
        try:
            out = subprocess.run([sys.executable, __file__, "--one", "--tokens", str(args.tokens), "--", p],
                                 capture_output=True, text=True, timeout=args.timeout, check=False)
            r = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
                {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:90]}
        except subprocess.TimeoutExpired:
            r = {"error": f"over {args.timeout:.0f} s"}
        if "error" in r:
            print(f"{p:24} refused/failed: {r['error']}" + (f" ({r['s']:.2f} s)" if "s" in r else ""))
        else:
            print(f"{p:24} {r['s']:9.2f} {r['mb']:7.0f} {r['states']:7d} {r['mask_ms']:13.2f}")


if __name__ == "__main__":
    main()
