"""Context-free grammar corpus (tests/runtime/data/grammars/: JSON, arithmetic, SQL SELECT, CSV, config; Lark and
GBNF twins), model-free through the SmolLM2 tokenizer: sglite beside llguidance (Lark sources; skipped if not
installed), same run, same strings.

Per grammar: compile time (the frontend and everything up to the first mask's caches; the token index is built
once before and shared, as in a server); then every case string is fed token by token, the mask computed
before each token (timed; as packed int32 words, the form the engine fills before a step and llguidance's
compute_bitmask returns) and the token checked against it; a valid string passes if EOS is allowed at its
end, an invalid one if it is rejected somewhere. The strings are fed twice: `cold` is the first pass (every
parse state new), `warm` the second (masks cached per parse state, as in a server that has seen such text).
Times are per-thread CPU time (`time.thread_time_ns()`); the machine is shared, so treat them as +-30%.
llguidance lexes greedily (a lexeme ends only where it cannot go on) where sglite and lark's `dynamic_complete`
Earley parser (the oracle) try every split, so their verdicts can differ on purpose.

    python bench/grammars.py [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "runtime" / "data" / "grammars"


class Sglite:
    name = "sglite"

    def __init__(self, tok):
        import torch
        from sglite.runtime.constrained import GrammarCompiler
        self.compiler = GrammarCompiler(tok)
        self.bitmask = torch.zeros((1, (tok.vocab_size + 31) // 32), dtype=torch.int32)
        self.words = self.bitmask.numpy()[0]     # a view: what fill_bitmask writes

    def compile(self, text: str, syntax: str):
        from sglite.runtime.constrained.cfg import gbnf_to_ir, lark_to_ir, lower_rules
        from sglite.runtime.constrained.compiler import CLASSIFY_STATES
        from sglite.runtime.constrained.parser.grammar import Grammar
        rules = lark_to_ir(text) if syntax == "lark" else gbnf_to_ir(text)
        # uncached: a new grammar every time
        g = Grammar(syntax, text, self.compiler.index, lower_rules(rules), classify_states=CLASSIFY_STATES)
        self.mask(g.matcher())
        return g

    def start(self, g):
        return g.matcher()

    def mask(self, m) -> np.ndarray:
        m.fill_next_token_bitmask(self.bitmask, 0)      # what the engine computes before a step: the packed words
        return self.words

    def allowed(self, mask, t: int) -> bool:
        return bool((int(mask[t >> 5]) >> (t & 31)) & 1)

    def advance(self, m, t: int) -> bool:
        return m.accept_token(t)

    def accepting(self, m, eos: int) -> bool:
        return m.is_accepting()


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok):
        import llguidance as llg
        self.llg = llg
        self.lt = llg.LLTokenizer(tok.hf.to_str(), n_vocab=tok.vocab_size, eos_token=tok.eos_token_id)

    def compile(self, text: str, syntax: str):
        if syntax != "lark":
            raise ValueError("llguidance takes Lark (GBNF through its own converter, not compared here)")
        g = self.llg.LLMatcher.grammar_from_lark(text)
        m = self.llg.LLMatcher(self.lt, g)
        if m.is_error():
            raise ValueError(m.get_error())
        m.compute_bitmask()
        return g

    def start(self, g):
        return self.llg.LLMatcher(self.lt, g)

    def mask(self, m) -> np.ndarray:
        return np.frombuffer(m.compute_bitmask(), dtype=np.uint32)

    def allowed(self, mask, t: int) -> bool:
        return bool((int(mask[t >> 5]) >> (t & 31)) & 1)

    def advance(self, m, t: int) -> bool:
        return m.consume_token(t)

    def accepting(self, m, eos: int) -> bool:
        return self.allowed(self.mask(m), eos)


def feed(engine, g, ids: list[int], eos: int, times: list[float]) -> bool:
    """True if the token ids are accepted with EOS allowed at the end; mask times (µs) appended to `times`."""
    m = engine.start(g)
    for t in ids:
        t0 = time.thread_time_ns()
        mask = engine.mask(m)
        times.append((time.thread_time_ns() - t0) * 1e-3)
        if not engine.allowed(mask, t) or not engine.advance(m, t):
            return False
    return engine.accepting(m, eos)


def run(engine, tok, name: str, syntax: str, rounds: int) -> dict | None:
    cases = json.loads((DATA / f"{name}.cases.json").read_text())
    text = (DATA / f"{name}.{syntax}").read_text()
    t0 = time.thread_time_ns()
    try:
        g = engine.compile(text, syntax)
    except Exception as e:   # noqa: BLE001 - a peer that cannot take the grammar is reported, not fatal
        return {"error": f"{type(e).__name__}: {str(e)[:60]}"}
    out = {"compile_ms": (time.thread_time_ns() - t0) * 1e-6, "valid": len(cases["valid"]),
           "invalid": len(cases["invalid"])}
    for r in range(rounds):
        times: list[float] = []
        ok_valid = sum(feed(engine, g, tok.encode(s), tok.eos_token_id, times) for s in cases["valid"])
        ok_invalid = sum(not feed(engine, g, tok.encode(s), tok.eos_token_id, times) for s in cases["invalid"])
        out[r] = {"accepted": ok_valid, "rejected": ok_invalid, "p50": float(np.percentile(times, 50)),
                  "p99": float(np.percentile(times, 99)), "masks": len(times)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="passes over the strings (1 = cold only)")
    args = ap.parse_args()
    from sglite.runtime.tokenizer import load_tokenizer
    tok = load_tokenizer()
    engines = [Sglite(tok)]
    try:
        engines.append(LLGuidance(tok))
    except ImportError:
        print("(llguidance not installed: sglite only)")
    sources = [(p.stem, s) for p in sorted(DATA.glob("*.lark")) for s in ("lark", "gbnf")
               if (DATA / f"{p.stem}.{s}").exists()]
    print("| grammar | engine | compile ms | valid accepted | invalid rejected | cold mask p50 µs | cold p99 µs "
          "| warm mask p50 µs | warm p99 µs | masks |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, syntax in sources:
        for engine in engines:
            if engine.name != "sglite" and syntax != "lark":
                continue
            r = run(engine, tok, name, syntax, args.rounds)
            label = f"{name}.{syntax}"
            if "error" in r:
                print(f"| {label} | {engine.name} | {r['error']} | | | | | | | |")
                continue
            cold, warm = r[0], r.get(args.rounds - 1, r[0])
            print(f"| {label} | {engine.name} | {r['compile_ms']:.1f} | {cold['accepted']}/{r['valid']} | "
                  f"{cold['rejected']}/{r['invalid']} | {cold['p50']:.0f} | {cold['p99']:.0f} | {warm['p50']:.0f} | "
                  f"{warm['p99']:.0f} | {cold['masks']} |", flush=True)


if __name__ == "__main__":
    main()
