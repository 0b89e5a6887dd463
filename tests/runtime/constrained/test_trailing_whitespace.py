"""Whitespace after a JSON text's root value (RFC 8259: `[1] `, `{"a":1}\\n`): the exact matcher (whitespace "any")
accepts it when given, token by token with mask and advance agreeing, yet reports `is_terminated` at the root
close, where the engine stops a generation. The generation modes read no whitespace outside the value, and a
structural tag's JSON body keeps its end as before: what follows it is the tag's end."""
from __future__ import annotations

import json

import jsonschema
import pytest

from sglite.protocol import FinishKind, GenerateRequest, SamplingParams

from .conftest import feed

OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TEXTS = ['[1] ', '{"a":1}\n', ' \t{"a": 1}\r\n  ', '"x"\n', '12 ', 'true\n\n', 'null\t']


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    return bool(m.accept_string(text.encode())) and m.is_accepting()


@pytest.mark.parametrize("text", TEXTS)
def test_trailing_whitespace_accepted_under_any(compiler, tokenizer, text):
    value = json.loads(text)                                   # RFC 8259 text: the oracle reads it too
    schema = OBJ if isinstance(value, dict) else {}
    jsonschema.validate(value, schema)
    g = compiler.compile_json_schema(schema)
    assert _accepts(g, text)
    assert feed(tokenizer, g, text)                            # token by token, masks agree with advance


@pytest.mark.parametrize("whitespace", ["standard", "compact", "flexible"])
def test_generation_modes_read_none(compiler, whitespace):
    g = compiler.compile_json_schema(OBJ, whitespace=whitespace)
    plain = '{"a": 1}' if whitespace == "standard" else '{"a":1}'
    assert _accepts(g, plain)
    for tail in (" ", "\n", "\t"):
        assert not _accepts(g, plain + tail)


@pytest.mark.parametrize("text", ['[1] x', '[1]\n]', '{"a":1} {"a":1}', '1 2', '"x" "y"'])
def test_only_whitespace_follows(compiler, text):
    assert not _accepts(compiler.compile_json_schema({}), text)


def test_terminated_at_the_root_close_and_after_whitespace(compiler, tokenizer):
    g = compiler.compile_json_schema(OBJ)
    m = g.matcher()
    assert m.accept_string(b'{"a": 1')
    assert not m.is_terminated()
    assert m.accept_string(b"}")
    assert m.is_terminated() and m.is_accepting()
    # what may follow: EOS and whitespace tokens only
    allowed = [tokenizer.decode([int(t)]) for t in m.allowed_mask().nonzero()[0] if t != tokenizer.eos_token_id]
    assert allowed and all(not t.strip() for t in allowed)
    assert m.accept_string(b" \n") and m.is_terminated()
    assert m.accept_token(tokenizer.eos_token_id) and m.is_terminated()
    n = compiler.compile_json_schema({"type": "integer"}).matcher()
    assert n.accept_string(b"12") and not n.is_terminated()   # more digits may come
    assert n.accept_string(b" ") and n.is_terminated()


def test_rollback_over_trailing_whitespace(compiler):
    m = compiler.compile_json_schema(OBJ).matcher()
    m.accept_string(b'{"a":1}')
    m.accept_string(b"\n")
    m.rollback(1)
    assert m.is_terminated() and m.accept_string(b" ")


def test_structural_tag_bodies_unchanged(compiler, tokenizer):
    spec = {"structures": [{"begin": "<f>", "schema": OBJ, "end": "</f>"}], "triggers": ["<f>"]}
    g = compiler.compile_structural_tag(spec)
    assert feed(tokenizer, g, 'x <f>{"a": 1}</f> y')
    assert not feed(tokenizer, g, 'x <f>{"a": 1} </f> y')    # the body's end is the tag's end, as before
    body = compiler.compile_json_schema(OBJ)                   # the same grammar, run alone, reads it
    assert _accepts(body, '{"a": 1} ')


def test_engine_stops_at_the_root_close(tiny_model):
    from sglite.runtime.engine import Engine

    params = SamplingParams(json_schema=json.dumps({"enum": [[1, 2], {"k": "v"}]}), max_new_tokens=48,
                            temperature=0.0)
    with Engine(tiny_model, max_total_tokens=1024, json_whitespace="any") as engine:
        out = engine.submit(GenerateRequest(text="JSON:", params=params))[0].output()
    # stopped by the grammar (no EOS sampled, `matched` None) right at the root close
    assert out.finish_reason.kind == FinishKind.STOP and out.finish_reason.matched is None, out.finish_reason
    text = out.text
    assert text.rstrip() == text and json.loads(text) in ([1, 2], {"k": "v"})
