"""A structural tag is rules (as Lark and GBNF are) lowered to the one grammar IR, its JSON values the schemas'
IRs embedded; and over random texts it accepts exactly the language it stands for, checked against a direct oracle: find the first trigger,
match a structure's begin there, validate the JSON up to its end with jsonschema, go on after the end."""
from __future__ import annotations

import json
import random

import jsonschema
import pytest

from sglite.runtime.constrained import GrammarError
from sglite.runtime.constrained.cfg import CfgIR, lower_rules
from sglite.runtime.constrained.cfg.cfg_ir import Subgrammar
from sglite.runtime.constrained.ir.nodes import ObjectNode

from .conftest import feed

SHORT = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 3},
                                          "n": {"type": "integer", "minimum": 1}},
         "required": ["q"], "additionalProperties": False}
TOOLS = {"structures": [{"begin": "<tool_call>", "schema": SHORT, "end": "</tool_call>"},
                        {"begin": "<function=now>", "schema": {"type": "array", "items": {"type": "integer"},
                                                               "maxItems": 2}, "end": "</function>"}],
         "triggers": ["<tool_call>", "<function="]}
# triggers that overlap: in "x<f<g>" the trigger "<f" ends before "f<", so no "f<g>" structure starts there
OVERLAP = {"structures": [{"begin": "<f>", "schema": SHORT, "end": "</f>"},
                          {"begin": "f<g>", "schema": {"enum": [1, "a"]}, "end": "!"}],
           "triggers": ["<f", "f<"]}

PIECES = {
    "tools": ["Hi", " ", "x", "<", "<tool", "_call>", "<tool_call>", "</tool_call>", "<function=", "now>", "later>",
              "</function>", "\n", "call>"],
    "overlap": ["x", " ", "<", "f", "g", ">", "<f", "f<", "<f>", "f<g>", "</f>", "!", "1", '"a"'],
}
JSON_PIECES = ['{"q": "ab"}', '{"q":"abcd"}', '{"q": "a", "n": 2}', '{"q": "a", "n": 0}', '{"n": 2}', '{"q": 1}',
               '{"q": "a", "z": 1}', '{"q": "\\u0041"}', "[1, 2]", "[1, 2, 3]", "[]", '["a"]', "1", '"a"', "2",
               " [1] ", "{", '{"q": "a"', "[1,", "{}"]


def oracle(spec: dict, text: str) -> bool:
    """Whether `text` is in the structural tag's language, read directly: free text up to the first trigger (the
    earliest to end); there a structure whose begin starts with that trigger, then JSON valid under its schema
    up to one of the places where its end follows, then the same again after the end."""
    triggers, structures = spec["triggers"], spec["structures"]

    def free(pos: int) -> bool:
        found = [(i + len(t), t) for t in triggers if (i := text.find(t, pos)) >= 0]
        if not found:
            return True
        end = min(e for e, _ in found)
        for t in (t for e, t in found if e == end):
            start = end - len(t)
            for s in structures:
                if s["begin"].startswith(t) and text.startswith(s["begin"], start) and \
                        tagged(s, start + len(s["begin"])):
                    return True
        return False

    def tagged(s: dict, pos: int) -> bool:
        k = text.find(s["end"], pos)
        while k >= 0:
            if valid(text[pos:k], s["schema"]) and free(k + len(s["end"])):
                return True
            k = text.find(s["end"], k + 1)
        return False

    return free(0)


def valid(region: str, schema: dict) -> bool:
    """A JSON text valid under `schema`, as the JSON path reads a value: whitespace may come before it, none after
    (a value ends where its last character does, as when EOS follows it)."""
    if region != region.rstrip(" \t\n\r"):
        return False
    try:
        value = json.loads(region, parse_constant=_no_constant)
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def random_texts(spec: dict, pieces: list[str], n: int, seed: int) -> list[str]:
    """Texts made of free-text pieces, begins, JSON values (valid and not) and ends, in orders that are mostly
    well formed (so that acceptance is not rare) and partly shuffled."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(0, 4)):
            s = rng.choice(spec["structures"])
            parts += [rng.choice(pieces) for _ in range(rng.randint(0, 2))]
            parts += [s["begin"], rng.choice(JSON_PIECES), s["end"]]
        parts += [rng.choice(pieces) for _ in range(rng.randint(0, 2))]
        if rng.random() < 0.3:
            k = rng.randrange(len(parts) + 1)
            parts.insert(k, rng.choice(pieces + JSON_PIECES))
        if rng.random() < 0.2 and parts:
            parts.pop(rng.randrange(len(parts)))
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("name,spec", [("tools", TOOLS), ("overlap", OVERLAP)])
def test_random_texts_match_the_oracle(compiler, name, spec):
    g = compiler.compile_structural_tag(spec)
    verdicts = []
    for text in random_texts(spec, PIECES[name], 400, seed=len(name)):
        m = g.matcher()
        got = m.accept_string(text) and m.is_accepting()
        want = oracle(spec, text)
        assert got == want, f"{text!r}: grammar {got}, oracle {want}"
        verdicts.append(want)
    assert 0.1 < sum(verdicts) / len(verdicts) < 0.9       # both verdicts are well represented


def test_random_texts_token_by_token(tokenizer, compiler):
    """Masks agree with the parser at every token (conftest.feed), and the verdict with the oracle."""
    g = compiler.compile_structural_tag(TOOLS)
    for text in random_texts(TOOLS, PIECES["tools"], 60, seed=7):
        assert feed(tokenizer, g, text) == oracle(TOOLS, text), text


def test_a_structural_tag_is_one_grammar_ir(compiler):
    """The tag's rules and each structure's schema are one IR: the schema's object node sits in it (no grammar
    inside a grammar), and it prints as rules under the tag's names."""
    g = compiler.compile_structural_tag(TOOLS)
    alone = compiler.compile_json_schema(SHORT)
    objects = [n for n in g.nodes if isinstance(n, ObjectNode)]
    assert len(objects) == 1 and set(objects[0].props) == set(alone.nodes[alone.root].props) == {"q", "n"}
    text = str(g)
    assert "tags ::= TEXT | UPTO_0 JSON_0 END_0 tags_rest | UPTO_1 BEGIN_1 JSON_1 END_1 tags_rest2" in text
    assert 'BEGIN_1 ::= "now>"' in text and 'END_0 ::= "</tool_call>"' in text
    assert '"{" members("q": lexeme_10, "n"?: lexeme_11) "}"' in text and "string (<= 3 chars)" in text


def test_free_text_is_bytes(compiler):
    """Free text is read byte by byte, as text between tokens may split a character."""
    m = compiler.compile_structural_tag(TOOLS).matcher()
    assert m.accept_string(b"caf\xc3") and m.accept_string(b"\xa9 \xff") and m.is_accepting()


def test_many_calls_keep_the_parse_small(compiler):
    m = compiler.compile_structural_tag(TOOLS).matcher()
    for _ in range(200):
        assert m.accept_string('ok <tool_call>{"q": "a"}</tool_call>')
    # End, the structure's sequence before its last item, the end literal: the same after 1 call or 200
    assert m.is_accepting() and max(len(s) for s in m._stacks) <= 3


def test_subgrammar_must_not_be_empty(compiler):
    from sglite.runtime.constrained.cfg.cfg_ir import Sym
    body = compiler.compile_regex("a*").ir
    ir = CfgIR({"start": ((Sym("A", True),),)}, {"A": Subgrammar("A", body, "%regex a*")}, "start")
    with pytest.raises(GrammarError, match="subgrammar 'A' accepts the empty string"):
        lower_rules(ir)
