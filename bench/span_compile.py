"""Span constraints on long sources: compile time, the first masks' one-time cost and steady mask time per token,
for a `x-sglite-span` field (maxLength only: the direct build, span_dfa.py) beside the same span lowered through
the general character automata (grounding.substring_fsm + dfa_lowering, the path a pattern or format takes),
and a plain string field as the mask baseline.

    python bench/span_compile.py [--sizes 2000,8000,23500]

Sources: the synthetic reports joined (SmolLM2's tokenizer counts the tokens). The walk: a 60-character span of
one report as the model would write it, token by token, mask then advance."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,8000,23500")
    args = ap.parse_args(argv)

    import sglite.runtime.constrained.automata.grounding as grounding
    import sglite.runtime.constrained.schema.strings as strings
    from sglite.runtime.constrained.automata.dfa_lowering import lower_char_fsm
    from sglite.runtime.constrained import GrammarCompiler
    from sglite.runtime.tokenizer import load_tokenizer

    tok = load_tokenizer()
    docs = [json.loads(x)["text"] for x in open(ROOT / "examples/data/synthetic_reports.jsonl", encoding="utf-8")]
    joined = "\n\n".join(docs)
    target = json.dumps({"company": docs[3][:60]}, separators=(",", ":"), ensure_ascii=False)
    ids = tok.encode(target)
    grounding.MAX_SOURCE_CHARS = 10 ** 6          # the general path's cap lifted, to measure it
    direct = strings.span_dfa

    def walk(g) -> tuple[float, float]:
        """(first walk's ms per token, second walk's: cached masks)."""
        out = []
        for _ in range(2):
            m = g.matcher()
            t0 = time.perf_counter()
            for t in ids:
                assert m.allowed_mask()[t]
                m.accept_token(t)
            out.append((time.perf_counter() - t0) / len(ids) * 1e3)
        return out[0], out[1]

    print("| source chars | tokens | path | compile s | first walk ms/token | cached ms/token |")
    print("|---:|---:|---|---:|---:|---:|")
    for n in map(int, args.sizes.split(",")):
        text = joined[:n]
        ntok = len(tok.encode(text))
        for path, field in [("span, direct", {"maxLength": 120}), ("span, general lowering", {"maxLength": 120}),
                            ("plain string", None)]:
            strings.span_dfa = direct if path == "span, direct" else \
                (lambda text, canonical: lower_char_fsm(grounding.substring_fsm(text), True, canonical))
            comp = GrammarCompiler(tok)
            prop = ({"type": "string", "maxLength": 120} if field is None else
                    {"type": "string", **field, "x-sglite-span": {"text": text}})
            schema = {"type": "object", "properties": {"company": prop}, "required": ["company"]}
            t0 = time.perf_counter()
            g = comp.compile_json_schema(schema, whitespace="compact")
            compile_s = time.perf_counter() - t0
            first, cached = walk(g)
            print(f"| {len(text):,} | {ntok:,} | {path} | {compile_s:.3f} | {first:.2f} | {cached:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
