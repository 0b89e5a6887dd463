"""Jump-forward commits only tokens no grammar-allowed continuation could tokenize differently."""
from __future__ import annotations

import json
import random

import pytest

from sglite.runtime.constrained import jump_forward_tokens

CONTACT = {"type": "object", "additionalProperties": False,
           "required": ["name", "code", "active", "age", "tags"],
           "properties": {"name": {"type": "string"}, "code": {"type": "string", "pattern": "^[a-z]{2,8}$"},
                          "active": {"type": "boolean"}, "age": {"type": "integer", "minimum": 0},
                          "tags": {"type": "array", "items": {"enum": ["a", "bb", "vip"]}}}}


def replay(tokenizer, grammar, text: str) -> tuple[int, int]:
    """Feed the canonical tokens of `text`; wherever jump-forward commits tokens they must be exactly the next
    canonical tokens. Returns (tokens, forced)."""
    toks = tokenizer.encode(text)
    m = grammar.matcher()
    pos = forced = 0
    while pos < len(toks):
        jf = jump_forward_tokens(tokenizer, m)
        if jf:
            assert toks[pos:pos + len(jf)] == jf, (text, pos, [tokenizer.decode([t]) for t in jf])
            for t in jf:
                assert m.accept_token(t)
            pos += len(jf)
            forced += len(jf)
            continue
        assert m.accept_token(toks[pos]), (text, pos)
        pos += 1
    assert m.is_accepting()
    return len(toks), forced


def random_contact(rng: random.Random) -> dict:
    words = ["Ann", "Bob Lee", "", "(x)", '"q"', "a,b", "Ünï", "1234", " lead", ")", "{}"]
    return {"name": rng.choice(words), "code": "".join(rng.choice("abcxyz") for _ in range(rng.randint(2, 8))),
            "active": rng.random() < 0.5, "age": rng.choice([0, 7, 42, 1999, 123456]),
            "tags": rng.sample(["a", "bb", "vip"], rng.randint(0, 3))}


@pytest.mark.parametrize("order", ["schema", "any"])
def test_no_drift_on_replayed_instances(tokenizer, compiler, order):
    g = compiler.compile_json_schema(CONTACT, whitespace="compact", property_order=order)
    rng = random.Random(0)
    total = forced = 0
    for _ in range(60):
        inst = random_contact(rng)
        if order == "any":
            inst = dict(rng.sample(list(inst.items()), len(inst)))
        n, f = replay(tokenizer, g, json.dumps(inst, separators=(",", ":"), ensure_ascii=False))
        total, forced = total + n, forced + f
    assert forced > (total // 6 if order == "schema" else 0)


def test_non_string_values_let_the_colon_be_committed(tokenizer, compiler):
    """After `"active` only `":` can follow and no token starting inside it can continue into a boolean, so
    `":` is committed; before a free string, `":"` is held back (`""`, `")` ... could straddle)."""
    g = compiler.compile_json_schema(CONTACT, whitespace="compact", property_order="schema")
    m = g.matcher()
    assert m.accept_string(b'{"name":"Ann","code":"ab"')
    text = tokenizer.decode(jump_forward_tokens(tokenizer, m))
    assert text == ',"active":'
    m = g.matcher()
    assert tokenizer.decode(jump_forward_tokens(tokenizer, m)) == '{"name'
    m.accept_string(b'{"name":"Ann"')
    assert tokenizer.decode(jump_forward_tokens(tokenizer, m)) == ',"code":"'   # pattern: a letter comes next


def test_tokens_below_are_the_tokens_strictly_below_a_trie_node(compiler):
    """The preorder range jump-forward checks against a mask is exactly the tokens a walk of the trie finds below
    a node, the node's own tokens left out."""
    index = compiler.index
    rng = random.Random(0)
    nodes = [0, index.children[0][ord('"')], index.children[0][ord(" ")]] + \
        rng.sample(range(len(index.children)), 500)
    for node in nodes:
        walked, todo = [], list(index.children[node].values())
        while todo:
            n = todo.pop()
            walked.extend(index.ends[n])
            todo.extend(index.children[n].values())
        assert sorted(index.tokens_below(node).tolist()) == sorted(walked), node
