"""Generation mode that finishes: unique property names (`unique_keys`) and generation caps (`caps`), over the
real tokenizer. Every text goes through `feed`, which checks the mask against `advance` at each token."""
from __future__ import annotations

import random

import numpy as np
import pytest

from sglite.runtime.constrained.ir.generation_caps import GenerationCaps

from .conftest import feed

OPEN = {"type": "object", "additionalProperties": {"type": "integer"}}
CAPS = GenerationCaps(max_string_chars=5, max_array_items=3, max_object_depth=2)


def _gen(compiler, schema, **kw):
    return compiler.compile_json_schema(schema, whitespace="compact", **kw)


def _fed(tokenizer, grammar, text: str) -> tuple[bool, int]:
    """(accepted, capped_values) after feeding `text` with the mask checked at each token."""
    m = grammar.matcher()
    for t in tokenizer.encode(text):
        ok = bool(m.allowed_mask()[t])
        assert ok == m.accept_token(t), f"mask and advance disagree on {tokenizer.decode([t])!r} in {text!r}"
        if not ok:
            return False, m.capped_values
    return m.is_accepting(), m.capped_values


# --- unique keys -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, unique_ok", [
    ('{"x":1,"y":2}', True),
    ('{"x":1,"x":2}', False),
    ('{"x":1,"xx":2}', True),              # a longer name that starts with a seen one
    ('{"xx":1,"x":2}', True),              # a seen name that starts with this one
    ('{"ab":1,"a":2,"ab":3}', False),
    ('{"a":{"a":1},"b":2}', True),         # the same name in another object
])
def test_undeclared_names_do_not_repeat(compiler, tokenizer, text, unique_ok):
    schema = {"type": "object", "additionalProperties": {"anyOf": [{"type": "integer"}, OPEN]}}
    assert feed(tokenizer, _gen(compiler, schema, unique_keys=True), text) == unique_ok
    assert feed(tokenizer, _gen(compiler, schema), text)                    # off: JSON's exact semantics
    assert feed(tokenizer, compiler.compile_json_schema(schema), text)     # the exact matcher


def test_declared_and_pattern_names_do_not_repeat(compiler, tokenizer):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "patternProperties": {"^p_": {"type": "integer"}}, "additionalProperties": False}
    g = _gen(compiler, schema, unique_keys=True)
    assert feed(tokenizer, g, '{"a":1,"p_x":2,"p_y":3}')
    assert not feed(tokenizer, g, '{"p_x":2,"a":1,"p_x":3}')
    assert not feed(tokenizer, g, '{"a":1,"a":2}')
    assert feed(tokenizer, _gen(compiler, schema), '{"p_x":2,"a":1,"p_x":3}')


def test_finite_pattern_names_are_left_untracked(compiler, tokenizer):
    """A pattern naming finitely many names cannot be tracked without leaving a started name with no ending;
    such an object keeps JSON's semantics (documented in ObjectKeys.tracks_names)."""
    schema = {"type": "object", "patternProperties": {"^(a|b)$": {"type": "integer"}},
              "additionalProperties": False}
    g = _gen(compiler, schema, unique_keys=True)
    assert not g.parser.keys.tracks_names(g.root)
    assert feed(tokenizer, g, '{"a":1,"a":2}')
    g = _gen(compiler, OPEN, unique_keys=True)
    assert g.parser.keys.tracks_names(g.root)


@pytest.mark.parametrize("written", [b'{"ab":1,"a":2,', b'{"ab":1,"a":2,"', b'{"ab":1,"a":2,"a',
                                     b'{"ab":1,"a":2,"ab'])
def test_unique_key_mask_is_exactly_what_advances(compiler, written):
    """At names' starts and inside names that could finish as seen ones, the mask is exactly the set of tokens
    `advance` takes, over the whole vocabulary."""
    g = _gen(compiler, {"type": "object", "additionalProperties": {"type": "integer"}, "properties": {
        "b": {"type": "integer"}}}, unique_keys=True)
    m = g.matcher()
    assert m.accept_string(written)
    mask = m.allowed_mask()[:g.vocab_size]
    takes = np.array([m.copy().accept_token(t) for t in range(g.vocab_size)])
    assert mask.any()
    assert (mask == takes).all(), np.flatnonzero(mask != takes)[:10]


def _random_walks(grammar, tokenizer, seed: int, walks: int, steps: int, prefer=None) -> None:
    rng = random.Random(seed)
    for _ in range(walks):
        m = grammar.matcher()
        for _ in range(steps):
            if m.is_terminated():
                break
            allowed = [int(t) for t in np.flatnonzero(m.allowed_mask()) if t < grammar.vocab_size]
            assert allowed, "a live matcher must allow some token"
            for t in rng.sample(allowed, min(20, len(allowed))):
                assert m.copy().accept_token(t), tokenizer.decode([t])
            pick = [t for t in allowed if prefer and prefer(tokenizer.decode([t]))]
            t = rng.choice(pick) if pick and rng.random() < 0.7 else rng.choice(allowed)
            assert m.accept_token(t)


def test_masks_agree_with_advance_unique_and_capped(compiler, tokenizer):
    """Random walks favouring short names and quotes (so names repeat and finish mid-token) and nesting."""
    schema = {"type": "object", "properties": {"id": {"type": "integer"}},
              "additionalProperties": {"anyOf": [{"type": "string"}, {"$ref": "#"}, {"type": "array"}]}}
    g = _gen(compiler, schema, unique_keys=True, caps=CAPS)
    short = lambda s: len(s) <= 2 and s.strip() == s   # noqa: E731
    _random_walks(g, tokenizer, seed=1, walks=8, steps=60, prefer=short)


# --- caps ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schema, text, expected", [
    ({"type": "string"}, '"abcde"', (True, 1)),
    ({"type": "string"}, '"abcdef"', (False, 0)),
    ({"type": "string"}, '"abc"', (True, 0)),
    ({"type": "string", "maxLength": 10}, '"abcdefgh"', (True, 0)),        # the schema's bound wins
    ({"type": "string", "minLength": 8}, '"abcdefgh"', (True, 1)),         # lifted to minLength
    ({"type": "string", "minLength": 8}, '"abcdefghi"', (False, 1)),
    ({"type": "string", "pattern": "^a+$"}, '"aaaaaa"', (False, 0)),
    ({"type": "string", "pattern": "^a{7}$"}, '"aaaaaaa"', (True, 0)),      # finite: not capped
    ({"type": "array"}, "[1,2,3]", (True, 1)),
    ({"type": "array"}, "[1,2,3,4]", (False, 1)),
    ({"type": "array", "minItems": 5}, "[1,2,3,4,5]", (True, 1)),           # lifted to minItems
    ({"type": "array", "maxItems": 10}, "[1,2,3,4,5]", (True, 0)),
    ({}, '{"a":{"b":1}}', (True, 0)),
    ({}, '{"a":{"b":{"c":1}}}', (False, 0)),
    ({}, "[[1]]", (True, 0)),
    ({}, "[[[1]]]", (False, 0)),
])
def test_caps(compiler, tokenizer, schema, text, expected):
    assert _fed(tokenizer, _gen(compiler, schema, caps=CAPS), text) == expected
    assert feed(tokenizer, _gen(compiler, schema), text) == ("minLength" not in schema or len(text) >= 10)


def test_depth_cap_on_recursion(compiler, tokenizer):
    tree = {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
                                                                              "items": {"$ref": "#"}}},
            "additionalProperties": False}
    g = _gen(compiler, tree, caps=CAPS)
    # the containers of the cycle count (the $ref's object and its array), from the first $ref on
    assert _fed(tokenizer, g, '{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}') == (True, 1)   # {"v":3} at the cap
    assert not feed(tokenizer, g, '{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]}')
    # nesting the schema spells out is its own bound, however deep
    deep = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
        "type": "object", "properties": {"c": {"type": "object"}}}}}}}
    assert feed(tokenizer, _gen(compiler, deep, caps=CAPS, close_objects=True), '{"a":{"b":{"c":{}}}}')


def test_depth_cap_is_lifted_where_it_would_leave_no_value(compiler, tokenizer):
    # each object needs one property, and its only one holds objects: at the cap it stays, its array emptied
    x = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#"}}}, "minProperties": 1,
         "additionalProperties": False}
    g = _gen(compiler, x, caps=CAPS)
    assert feed(tokenizer, g, '{"a":[{"a":[{"a":[]}]}]}')
    assert not feed(tokenizer, g, '{"a":[{"a":[{"a":[{"a":[]}]}]}]}')
    # a required recursive property at the cap
    y = {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#"}}}, "required": ["k"],
         "additionalProperties": False}
    assert feed(tokenizer, _gen(compiler, y, caps=CAPS), '{"k":[{"k":[]}]}')


def test_caps_are_options(compiler):
    with pytest.raises(ValueError, match="max_string_chars"):
        GenerationCaps(max_string_chars=0)
    with pytest.raises(ValueError, match="caps must be a GenerationCaps"):
        compiler.compile_json_schema({"type": "string"}, caps={"max_string_chars": 3})
    with pytest.raises(ValueError, match="unique_keys"):
        compiler.compile_json_schema({"type": "string"}, unique_keys="yes")
    g = compiler.compile_json_schema({"type": "string"}, whitespace="compact", caps=GenerationCaps())
    assert "<= 512 chars" in str(g)
    off = GenerationCaps(max_string_chars=None, max_array_items=None, max_object_depth=None)
    assert compiler.compile_json_schema({}, whitespace="compact", caps=off).ir.capped == frozenset()
