"""Grammars through the engine on the tiny random model: sampling_params ebnf (GBNF, or Lark), grammar (Lark)
and structural_tag; every output that ends on its own parses with lark (or matches the tag's shape), a cut one
is a viable prefix; a bad grammar is a RequestError naming its kind before anything is queued."""
from __future__ import annotations

import json

import lark
import pytest

from sglite.protocol import RequestError

LIST = 'start: item ("," item)* "."\nitem: WORD | "(" start ")"\nWORD: /[a-z]{1,4}/'
LIST_GBNF = 'root ::= item ("," item)* "."\nitem ::= [a-z] [a-z]? [a-z]? [a-z]? | "(" root ")"'


@pytest.fixture(scope="module")
def compiler(tokenizer):
    from sglite.runtime.constrained import GrammarCompiler
    return GrammarCompiler(tokenizer)


@pytest.mark.parametrize("kind,text", [("grammar", LIST), ("ebnf", LIST_GBNF), ("ebnf", LIST)])
def test_outputs_parse_with_lark(make_engine, compiler, kind, text):
    e = make_engine()
    parser = lark.Lark(LIST, parser="earley", lexer="dynamic_complete")
    outs = e.generate(["List:", "Words:", "x", "(("], {"temperature": 1.0, "seed": 5, "max_new_tokens": 40,
                                                         kind: text})
    finished = 0
    for out in outs:
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            parser.parse(out["text"])           # raises if the output is not in the language
            finished += 1
        else:       # cut by max_new_tokens: a prefix of the language
            assert compiler.compile_grammar(LIST).matcher().accept_string(out["text"].encode())
    assert finished >= 1


def test_structural_tag_through_the_engine(make_engine):
    e = make_engine()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    tag = {"structures": [{"begin": "<c>", "schema": schema, "end": "</c>"}], "triggers": ["<c>"]}
    outs = e.generate(["a", "b", "c"], {"temperature": 1.0, "seed": 1, "max_new_tokens": 30, "structural_tag": tag})
    for out in outs:
        text = out["text"]
        while "<c>" in text:                     # every tag opened is a whole structure, or cut by the length
            body, _, rest = text.split("<c>", 1)[1].partition("</c>")
            if not _:
                assert out["meta_info"]["finish_reason"]["type"] == "length"
                break
            assert json.loads(body)["n"] == int(json.loads(body)["n"])
            text = rest


@pytest.mark.parametrize("kind,text", [("ebnf", "root ::= undefined_rule"), ("grammar", "start: ("),
                                       ("structural_tag", '{"structures": []}')])
def test_bad_grammar_is_a_request_error(make_engine, kind, text):
    e = make_engine()
    with pytest.raises(RequestError) as err:
        e.generate("x", {kind: text})
    assert err.value.param == kind and err.value.code == "invalid_grammar"
