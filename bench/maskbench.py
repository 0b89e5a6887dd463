"""MaskBench (JSONSchemaBench, model-free): sglite's grammar engine beside llguidance and outlines-core, same
run, same schemas, same tokenizer (SmolLM2's by default; --model FILE takes any model's, e.g. Gemma 3's
262,144-token SentencePiece vocabulary from its GGUF).

For each sampled schema and engine: compile (timed); for each test instance, serialise with json.dumps,
tokenize, and at every token compute the mask (timed), check the token is allowed and advance; at the end EOS
must be allowed. Valid instances must pass, invalid ones must be rejected somewhere. Each engine runs in a
forked worker with a per-schema timeout (a timeout counts as not compiled).

Compile and mask times are per-thread CPU time (`time.thread_time_ns()`), the same for all three engines: wall
clock on a shared machine mostly measures the neighbours. (An engine that computes on other threads would be
under-counted; none of the three does for these calls.)

    python bench/maskbench.py --limit 300 --seed 0 [--engines sglite,llguidance,outlines] [--timeout 30]
                              [--model PATH.gguf | HF folder]
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "maskbench"


# --- engines ---------------------------------------------------------------------------------------------------
class Sglite:
    name = "sglite"

    def __init__(self, tok):
        import torch
        from sglite.runtime.constrained import GrammarCompiler
        self.tok = tok
        self.compiler = GrammarCompiler(tok)
        self.bitmask = torch.zeros((1, (tok.vocab_size + 31) // 32), dtype=torch.int32)

    def compile(self, schema):
        return self.compiler.compile_json_schema(schema)

    def start(self, g):
        return g.matcher()

    def mask(self, m):
        m.fill_next_token_bitmask(self.bitmask, 0)
        return self.bitmask[0].numpy().view(np.uint32)

    def advance(self, m, t):
        return m.accept_token(t)


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok):
        import llguidance as llg
        self.llg = llg
        self.lt = llg.LLTokenizer(tok.hf.to_str(), n_vocab=tok.vocab_size, eos_token=tok.eos_token_id)

    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(schema)
        m = self.llg.LLMatcher(self.lt, g)
        if m.is_error():
            raise ValueError(m.get_error())
        return g

    def start(self, g):
        return self.llg.LLMatcher(self.lt, g)

    def mask(self, m):
        return np.frombuffer(m.compute_bitmask(), dtype=np.uint32)

    def advance(self, m, t):
        return m.consume_token(t)


class Outlines:
    name = "outlines"

    def __init__(self, tok):
        import outlines_core as oc
        import torch
        self.oc = oc
        vmap: dict[bytes, list[int]] = {}
        for i, b in enumerate(tok.all_token_bytes()):
            if i != tok.eos_token_id and i not in tok.special_token_ids:
                vmap.setdefault(b, []).append(i)
        self.voc = oc.Vocabulary(tok.eos_token_id, vmap)
        self.buf = torch.zeros(((tok.vocab_size + 31) // 32,), dtype=torch.int32)

    def compile(self, schema):
        rx = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        return self.oc.Index(rx, self.voc)

    def start(self, idx):
        return self.oc.Guide(idx)

    def mask(self, g):
        g.write_mask_into(self.buf.data_ptr(), self.buf.numel(), 4)
        return self.buf.numpy().view(np.uint32)

    def advance(self, g, t):
        try:
            g.advance(t, return_tokens=False)
            return True
        except Exception:
            return False


ENGINES = {"sglite": Sglite, "llguidance": LLGuidance, "outlines": Outlines}


def _allowed(words: np.ndarray, t: int) -> bool:
    return bool((int(words[t >> 5]) >> (t & 31)) & 1)


def run_schema(engine, tok, path: str) -> dict:
    d = json.loads(Path(path).read_text())
    res = dict(compiled=False, error="", compile_s=0.0, valid_rejected=0, invalid_accepted=0, tests=0,
               wrong=0, mask_us=[])
    t0 = time.thread_time_ns()
    try:
        g = engine.compile(d["schema"])
    except Exception as e:  # noqa: BLE001 - any failure counts as not compiled
        res["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        return res
    res["compile_s"] = (time.thread_time_ns() - t0) * 1e-9
    res["compiled"] = True
    eos = tok.eos_token_id
    for test in d.get("tests", []):
        res["tests"] += 1
        m = engine.start(g)
        ok = True
        for t in tok.encode(json.dumps(test["data"])):
            t1 = time.thread_time_ns()
            words = engine.mask(m)
            res["mask_us"].append((time.thread_time_ns() - t1) * 1e-3)
            if not _allowed(words, t) or not engine.advance(m, t):
                ok = False
                break
        if ok:
            t1 = time.thread_time_ns()
            words = engine.mask(m)
            res["mask_us"].append((time.thread_time_ns() - t1) * 1e-3)
            ok = _allowed(words, eos)
        if ok != test["valid"]:
            res["wrong"] += 1
            if test["valid"]:
                res["valid_rejected"] += 1
            else:
                res["invalid_accepted"] += 1
    return res


def jump_forward_stats(tok, compiler, files: list[str]) -> dict:
    """Replay each valid instance (compact JSON, the generation mode) as if the model wrote its canonical
    tokens; wherever the grammar forces text, take jump_forward_tokens instead and check they are exactly the
    tokens the model would have produced (a mismatch is a drift)."""
    from sglite.runtime.constrained import GrammarError, UnsupportedSchemaError, jump_forward_tokens
    total = forced = drift = calls = 0
    for f in files:
        d = json.loads(Path(f).read_text())
        try:
            g = compiler.compile_json_schema(d["schema"], whitespace="compact")
        except (UnsupportedSchemaError, GrammarError):
            continue
        for test in d.get("tests", []):
            if not test["valid"]:
                continue
            toks = tok.encode(json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False))
            m = g.matcher()
            pos, ok = 0, True
            while pos < len(toks) and ok:
                jf = jump_forward_tokens(tok, m)
                calls += 1
                if jf:
                    if toks[pos:pos + len(jf)] == jf:
                        for t in jf:
                            m.accept_token(t)
                        pos += len(jf)
                        forced += len(jf)
                        continue
                    drift += 1
                ok = m.accept_token(toks[pos])
                pos += 1
            total += len(toks)
    return dict(tokens=total, forced=forced, drift=drift, calls=calls)


def _worker(name: str, model: str | None, conn) -> None:
    sys.path.insert(0, str(ROOT.parent))
    try:
        from sglite.runtime.tokenizer import load_tokenizer
        tok = load_tokenizer(model)
        engine = ENGINES[name](tok)
    except BaseException as e:      # say why to the parent now, rather than let it wait out its timeout
        conn.send(f"{type(e).__name__}: {e}")
        return
    conn.send("ready")
    while True:
        path = conn.recv()
        if path is None:
            return
        conn.send(run_schema(engine, tok, path))


class Runner:
    """One engine in a forked process; restarted after a timeout."""

    def __init__(self, name: str, timeout: float, model: str | None = None):
        self.name, self.timeout, self.model = name, timeout, model
        self.proc = None

    def _start(self):
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(self.name, self.model, child), daemon=True)
        self.proc.start()
        if not self.conn.poll(300):
            raise RuntimeError(f"{self.name} worker did not start within 300 s")
        msg = self.conn.recv()
        if msg != "ready":
            raise RuntimeError(f"{self.name} worker did not start: {msg}")

    def run(self, path: str) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(path)
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        self.proc.kill()
        self.proc.join()
        self.proc = None
        return dict(compiled=False, error="timeout", compile_s=0.0, valid_rejected=0, invalid_accepted=0,
                    tests=0, wrong=0, mask_us=[])

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(5)


def _pct(xs, q):
    return float(np.percentile(xs, q)) if len(xs) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", default="sglite,llguidance,outlines")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per schema per engine")
    ap.add_argument("--show-errors", type=int, default=0, help="print the N most common sglite errors")
    ap.add_argument("--show-wrong", action="store_true")
    ap.add_argument("--model", default=None, help="the tokenizer of this GGUF file or HF folder (default: "
                                                  "SmolLM2-135M's)")
    ap.add_argument("--jump-forward", action="store_true",
                    help="instead: how many tokens jump-forward commits on valid instances, and drifts")
    args = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"MaskBench data not found at {DATA}")
    files = sorted(str(p) for p in DATA.glob("*.json"))
    files = random.Random(args.seed).sample(files, min(args.limit, len(files)))
    if args.jump_forward:
        sys.path.insert(0, str(ROOT.parent))
        from sglite.runtime.constrained import GrammarCompiler
        from sglite.runtime.tokenizer import load_tokenizer
        tok = load_tokenizer(args.model)
        st = jump_forward_stats(tok, GrammarCompiler(tok), files)
        print(f"jump-forward on {len(files)} schemas' valid instances (compact JSON): {st['forced']} of "
              f"{st['tokens']} tokens committed without sampling ({100 * st['forced'] / max(st['tokens'], 1):.1f}%), "
              f"{st['drift']} drifts (committed tokens != the model's own tokenization)")
        return
    names = args.engines.split(",")
    rows = {}
    per = {n: [] for n in names}
    t_start = time.time()
    for n in names:
        r = Runner(n, args.timeout, args.model)
        for i, f in enumerate(files):
            per[n].append(r.run(f))
        r.close()
        print(f"# {n}: done in {time.time() - t_start:.0f}s", file=sys.stderr, flush=True)
    for n in names:
        res = per[n]
        comp = [x for x in res if x["compiled"]]
        masks = [u for x in comp for u in x["mask_us"]]
        ctimes = [x["compile_s"] * 1e3 for x in comp]
        rows[n] = dict(
            compiled=len(comp), passing=sum(1 for x in comp if x["wrong"] == 0),
            valid_rejected=sum(x["valid_rejected"] for x in comp),
            invalid_accepted=sum(x["invalid_accepted"] for x in comp),
            timeouts=sum(1 for x in res if x["error"] == "timeout"),
            compile_p50=_pct(ctimes, 50), compile_p99=_pct(ctimes, 99),
            mask_p50=_pct(masks, 50), mask_p99=_pct(masks, 99), masks=len(masks))
    tokenizer = "SmolLM2 tokenizer" if args.model is None else f"tokenizer of {Path(args.model).name}"
    print(f"MaskBench sample: {len(files)} schemas (seed {args.seed}), {tokenizer}, timeout "
          f"{args.timeout:.0f}s/schema; compile and mask times are per-thread CPU time\n")
    print("| engine | compiled | passing all tests | valid rejected | invalid accepted | timeouts | "
          "compile p50 ms | compile p99 ms | mask p50 µs | mask p99 µs | masks |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in rows.items():
        print(f"| {n} | {r['compiled']} | {r['passing']} | {r['valid_rejected']} | {r['invalid_accepted']} | "
              f"{r['timeouts']} | {r['compile_p50']:.1f} | {r['compile_p99']:.1f} | {r['mask_p50']:.0f} | "
              f"{r['mask_p99']:.0f} | {r['masks']} |")
    if "sglite" in per:
        if args.show_errors:
            errs = collections.Counter(x["error"].split(" (remove")[0][:120] for x in per["sglite"] if x["error"])
            print("\nsglite not compiled:")
            for e, c in errs.most_common(args.show_errors):
                print(f"  {c:4d}  {e}")
        if args.show_wrong:
            for f, x in zip(files, per["sglite"]):
                if x["wrong"]:
                    print(f"  WRONG {Path(f).name}: valid_rejected={x['valid_rejected']} "
                          f"invalid_accepted={x['invalid_accepted']}")
        if "llguidance" in per:
            both = sum(1 for a, b in zip(per["sglite"], per["llguidance"]) if b["compiled"] and not a["compiled"])
            print(f"\nschemas llguidance compiles but sglite does not: {both}")


if __name__ == "__main__":
    main()
