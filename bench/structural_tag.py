"""Structural-tag masks, model-free, through the SmolLM2 tokenizer: the tag the server builds for `tool_choice:
auto` over four tools (server/tools.py's shape: trigger `<tool_call>`, begin up to the arguments, the arguments
under each tool's schema, end `}\\n</tool_call>`), compiled once, then a reply with free text and two calls
fed token by token: the mask before each token (fill_next_token_bitmask, timed), the token checked against it
and accepted, EOS allowed at the end. `cold` is the first pass (every parse state new), `warm` the second
(masks cached per state). Times are per-thread CPU time; the machine is shared, so treat them as +-30% and
compare only runs made in the same minutes.

    python bench/structural_tag.py [--whitespace standard|any]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

TOOLS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city"], "additionalProperties": False},
    "search": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 200},
                                                "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
               "required": ["query"]},
    "calculator": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    "send_email": {"type": "object", "properties": {"to": {"type": "array", "items": {"type": "string",
                                                                                      "format": "email"}},
                                                    "subject": {"type": "string"}, "body": {"type": "string"}},
                   "required": ["to", "subject", "body"]},
}
SPEC = {"structures": [{"begin": '<tool_call>\n{"name": %s, "arguments": ' % json.dumps(name), "schema": schema,
                        "end": "}\n</tool_call>"} for name, schema in TOOLS.items()],
        "triggers": ["<tool_call>"]}
REPLY = ("Let me check the weather in Paris and look for today's news there.\n"
         '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "search", "arguments": {"query": "Paris news today", "max_results": 5}}\n</tool_call>\n'
         "I will summarise both results for you once they come back. If you want, I can also email them to you "
         "or compute the average temperature of the week.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--whitespace", default="standard", choices=["standard", "any"])
    args = ap.parse_args()
    import torch
    from sglite.runtime.constrained import GrammarCompiler
    from sglite.runtime.tokenizer import load_tokenizer
    tok = load_tokenizer()
    compiler = GrammarCompiler(tok)         # the token index is built here, once, as in a server
    ids = tok.encode(REPLY)
    bitmask = torch.zeros((1, (tok.vocab_size + 31) // 32), dtype=torch.int32)
    words = bitmask.numpy()[0]
    t0 = time.thread_time_ns()
    g = compiler.compile_structural_tag(SPEC, whitespace=args.whitespace)
    compile_ms = (time.thread_time_ns() - t0) / 1e6
    print(f"structural tag, {len(TOOLS)} tools, whitespace={args.whitespace}: compile {compile_ms:.1f} ms; "
          f"reply of {len(ids)} tokens")
    print(f"{'pass':6} {'total ms':>9} {'mean ms':>8} {'p50 ms':>8} {'max ms':>8}")
    for name in ("cold", "warm"):
        m = g.matcher()
        times = []
        for t in ids:
            t0 = time.thread_time_ns()
            m.fill_next_token_bitmask(bitmask, 0)
            times.append(time.thread_time_ns() - t0)
            if not (int(words[t >> 5]) >> (t & 31)) & 1 or not m.accept_token(t):
                raise SystemExit(f"token {tok.decode([t])!r} rejected")
        if not m.is_accepting():
            raise SystemExit("EOS not allowed at the end of the reply")
        ms = np.array(times) / 1e6
        print(f"{name:6} {ms.sum():9.2f} {ms.mean():8.4f} {np.median(ms):8.4f} {ms.max():8.2f}")


if __name__ == "__main__":
    main()
