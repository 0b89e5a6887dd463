"""End to end with the real SmolLM2-135M (slow): greedy generations under two grammars (the corpus's SQL SELECT
in Lark, and a bounded part of the corpus's arithmetic language in GBNF: with unbounded digits or nesting the
small model writes 1.1111... or *(1 + 1) *(1 + 2)... to the length limit) end on their own and parse with lark's
Earley parser under the corpus grammar."""
from __future__ import annotations

from pathlib import Path

import lark
import pytest

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent.parent / "data" / "grammars"
ARITH = """root  ::= term ( " "? [-+] " "? term ){0,2}
term  ::= atom ( " "? [*/] " "? atom ){0,2}
atom  ::= num | "(" num ( " "? [-+*/] " "? num ){1,2} ")"
num   ::= [0-9]{1,3}
"""
REQUESTS = {
    "sql": ("sql.lark", ["Write a SQL query that lists the names of users older than 30.",
                         "Write a SQL query that counts the orders of each customer."]),
    "arith": (ARITH, ["Write an arithmetic expression that computes the area of a 3 by 4 rectangle plus 5.",
                             "Write the arithmetic expression for twice the sum of 7 and 8."]),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_generations_parse_with_lark(real_model, name):
    from sglite.runtime.engine import Engine

    source, requests = REQUESTS[name]
    text = (DATA / source).read_text() if source.endswith(".lark") else source
    kind = "grammar" if source.endswith(".lark") else "ebnf"
    tok = real_model.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": r}]) for r in requests]
    parser = lark.Lark((DATA / f"{name}.lark").read_text(), parser="earley", lexer="dynamic_complete")
    with Engine(real_model) as engine:
        outs = engine.generate(prompts, {"temperature": 0, "max_new_tokens": 64, kind: text})
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out["text"]
        parser.parse(out["text"])
