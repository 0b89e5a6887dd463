"""Structural tags: free text, a trigger switches into begin + JSON under the structure's schema + end, then
free text again; checked token-wise through the SmolLM2 tokenizer (mask and advance agree at every token)."""
from __future__ import annotations

import json

import pytest

from sglite.runtime.constrained import GrammarError

from .conftest import feed

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
SPEC = {"structures": [{"begin": "<tool_call>", "schema": CITY, "end": "</tool_call>"},
                       {"begin": "<function=now>", "schema": {"type": "object", "additionalProperties": False},
                        "end": "</function>"}],
        "triggers": ["<tool_call>", "<function="]}


@pytest.mark.parametrize("text,ok", [
    ("Hello, no tools needed.", True),
    ('Sure. <tool_call>{"city": "Paris"}</tool_call> Done.', True),
    ('<tool_call>{"city":"a"}</tool_call><tool_call>{"city":"b"}</tool_call>\n', True),
    ("Now: <function=now>{}</function>", True),
    ('<tool_call>{"city": 1}</tool_call>', False),            # the schema holds inside the tag
    ('<tool_call>{"town": "x"}</tool_call>', False),
    ("<function=later>{}</function>", False),                 # a trigger must go on as some structure's begin
    ('<tool_call>{"city": "x"}', False),                      # EOS only in free text
    ('<tool_call>{"city": "x"}</tool_call', False),
])
def test_structural_tag_texts(tokenizer, compiler, text, ok):
    g = compiler.compile_structural_tag(SPEC)
    assert feed(tokenizer, g, text) is ok


def test_structural_tag_interface(tokenizer, compiler):
    g = compiler.compile_structural_tag(json.dumps(SPEC))
    assert compiler.compile_structural_tag(SPEC) is g
    m = g.matcher()
    assert m.is_accepting() and m.find_jump_forward_string() == ""
    assert m.accept_string(b"Calling <tool_") and m.is_accepting()    # half a trigger is still free text
    assert m.accept_string(b"call>") and not m.is_accepting()
    c = compiler.compile_structural_tag(SPEC, whitespace="compact", property_order="schema").matcher()
    assert c.accept_string(b"x <tool_call>")
    assert c.find_jump_forward_string() == '{"city":"'
    assert "<tool_call>" in str(g)


@pytest.mark.parametrize("spec,needle", [
    ({"structures": [], "triggers": ["<a>"]}, "'structures' must be a non-empty list"),
    ({"structures": [{"begin": "<b>", "schema": {}, "end": "</b>"}], "triggers": ["<a>"]}, "must start with one"),
    ({"structures": [{"begin": "<a>", "schema": {}, "end": ""}], "triggers": ["<a>"]}, "structures[0].end"),
    ({"structures": [{"begin": "<a>", "schema": {"type": "nope"}, "end": "</a>"}], "triggers": ["<a>"]},
     "structures[0].schema"),
    ({"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": []}, "'triggers'"),
    ("{not json", "not valid JSON"),
])
def test_structural_tag_errors(compiler, spec, needle):
    with pytest.raises(GrammarError) as e:
        compiler.compile_structural_tag(spec)
    assert needle in str(e.value), str(e.value)
