"""gen(grammar=...) and gen(ebnf=...) in the language, on the tiny model: the value is in the grammar's language."""
from __future__ import annotations

import lark

import sglite as sgl

GRAMMAR = 'start: ANSWER ("," ANSWER)* "."\nANSWER: "yes" | "no"'


def test_gen_grammar_and_ebnf(tiny_runtime):
    @sgl.function
    def prog(s):
        s += "Answers: " + sgl.gen("a", max_tokens=24, temperature=1.0, grammar=GRAMMAR)
        s += "\nMore: " + sgl.gen("b", max_tokens=24, temperature=1.0, ebnf='root ::= ("yes" | "no") "."')

    state = prog.run(backend=tiny_runtime, seed=3)
    parser = lark.Lark(GRAMMAR, parser="earley", lexer="dynamic_complete")
    if state.get_meta_info("a")["finish_reason"]["type"] == "stop":
        parser.parse(state["a"])
    else:
        assert set(state["a"]) <= set("yesno,.")
    assert state["b"] in ("yes.", "no.") or state.get_meta_info("b")["finish_reason"]["type"] == "length"
    assert sgl.gen("x", grammar=GRAMMAR).params.sampling["grammar"] == GRAMMAR
