"""Closing at the token budget (parser/closing.py, GrammarMatcher.closing_words): the shortest completion of a
parse state, and the mask that spends a request's last tokens on it."""
from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from sglite.runtime.constrained.parser.closing import closing_bytes
from sglite.runtime.constrained.parser.matcher import CLOSE_MARGIN
from sglite.runtime.engine.grammar_backend import GENERATION_CAPS

SCHEMA = {"type": "object", "required": ["name", "tags", "n", "meta"], "properties": {
    "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
    "n": {"type": "integer"}, "meta": {"type": "object", "properties": {"v": {"type": "number"}}, "required": ["v"]}}}


@pytest.fixture(scope="module")
def grammar(compiler):
    # generation mode, as the engine compiles JSON schemas
    return compiler.compile_json_schema(json.dumps(SCHEMA), whitespace="standard", property_order="schema",
                                        close_objects=True, unique_keys=True, caps=GENERATION_CAPS)


def _close(grammar, prefix: str) -> str:
    """prefix, then the smallest first byte of a shortest completion, byte by byte, until the grammar accepts."""
    m = grammar.matcher()
    assert m.accept_string(prefix.encode())
    out = b""
    while True:
        depth, first, _ = closing_bytes(grammar, m._stacks, horizon=200)
        if depth == 0:
            return prefix + out.decode()
        b = bytes((min(first),))
        assert m.accept_string(b)
        out += b


@pytest.mark.parametrize("prefix, completion", [
    ("", '{"name": "", "tags": [], "n": 0, "meta": {"v": 0}}'),
    ('{"name": "abc', '", "tags": [], "n": 0, "meta": {"v": 0}}'),
    ('{"name": "abc", "tags": ["x", "yy', '"], "n": 0, "meta": {"v": 0}}'),
    ('{"name": "a", "tags": [], "n": 12', ', "meta": {"v": 0}}'),
    ('{"name": "a", "tags": [], "n": 1, "meta": {"v": 1.5', "}}"),
])
def test_shortest_completion(grammar, prefix, completion):
    m = grammar.matcher()
    assert m.accept_string(prefix.encode())
    depth, _, _ = closing_bytes(grammar, m._stacks, horizon=200)
    assert depth == len(completion)
    text = _close(grammar, prefix)
    assert text == prefix + completion
    jsonschema.validate(json.loads(text), SCHEMA)


def test_no_completion_within_bounds(compiler):
    schema = {**SCHEMA, "required": [*SCHEMA["required"], "z"], "properties": {**SCHEMA["properties"], "z": {}}}
    g = compiler.compile_json_schema(json.dumps(schema), whitespace="standard", property_order="schema",
                                     close_objects=True)
    wide = g.matcher()
    assert wide.accept_string(b'{"name": "')
    assert closing_bytes(g, wide._stacks, horizon=200, max_steps=5) is None    # the search's work is bounded,
    assert closing_bytes(g, wide._stacks, horizon=200) is None                 # and such a state is not retried
    start = g.matcher()._stacks
    assert closing_bytes(g, start, horizon=10) is None                   # a completion is longer than 10 bytes
    depth, first, cost = closing_bytes(g, start, horizon=200)
    assert depth > 10 and first == {ord("{")}
    assert cost < depth                 # the keys and separators are forced text: a few tokens, not a byte each
    assert closing_bytes(g, start, horizon=depth) == (depth, first, cost)   # from the cache
    assert closing_bytes(g, start, horizon=depth - 1) is None


def _ids(words: np.ndarray) -> list[int]:
    return np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")).tolist()


def test_closing_words(grammar, tokenizer):
    m = grammar.matcher()
    assert m.accept_string(b'{"name": "a", "tags": [], "n": 1, "meta": {"v": 1.5')   # "}}" completes it
    assert m.closing_words(50) is None and not m.closed_at_budget             # room left: the model's own mask
    words = m.closing_words(2 + 1 + CLOSE_MARGIN)                                  # 2 bytes + EOS + margin
    assert [tokenizer.decode([t]) for t in _ids(words)] == ["}"]
    assert m.closed_at_budget
    assert m.accept_string(b"}}")
    assert _ids(m.closing_words(1)) == [tokenizer.eos_token_id]                   # accepting: EOS alone
    copy = m.copy()
    assert copy.closed_at_budget


def test_closing_never_bypasses_the_grammar(grammar, tokenizer):
    """Every token a closing mask allows is one the grammar allows."""
    m = grammar.matcher()
    assert m.accept_string(b'{"name": "abc", "tags": ["x", "yy')
    cost = closing_bytes(grammar, m._stacks, horizon=200).tokens
    assert m.closing_words(cost + 2 + CLOSE_MARGIN) is None
    closing = set(_ids(m.closing_words(cost + 1 + CLOSE_MARGIN)))
    assert closing and closing <= set(np.flatnonzero(m.allowed_mask()).tolist())
