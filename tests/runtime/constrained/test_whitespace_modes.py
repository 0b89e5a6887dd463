"""Generation-mode whitespace ("compact", "standard", "flexible") and closed objects, over the real tokenizer."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from .conftest import feed

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "integer"}},
    "inner": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
}, "required": ["name"]}
VALUE = {"name": "Ada", "tags": [1, 22, 3], "inner": {"x": 1.5}}


def _texts(value) -> dict[str, str]:
    return {"compact": json.dumps(value, separators=(",", ":")), "standard": json.dumps(value),
            "indent2": json.dumps(value, indent=2), "tabs": json.dumps(value, indent="\t")}


@pytest.mark.parametrize("mode, accepted", [
    ("compact", {"compact"}),
    ("standard", {"standard"}),
    ("flexible", {"compact", "standard", "indent2", "tabs"}),
    ("any", {"compact", "standard", "indent2", "tabs"}),
])
def test_each_mode_accepts_its_style(compiler, tokenizer, mode, accepted):
    g = compiler.compile_json_schema(SCHEMA, whitespace=mode, property_order="schema")
    for style, text in _texts(VALUE).items():
        assert feed(tokenizer, g, text) == (style in accepted), (mode, style, text)


@pytest.mark.parametrize("text", [
    '{"name":  "Ada"}',                  # two spaces: one run is one space or a newline and an indent
    '{"name": \n"Ada"}',                 # a space then a newline: two runs in a row
    ' {"name": "Ada"}',                  # before the value
    '{"name": "Ada"} ',                  # after it
    '{"name": "Ada"\n\n\n}',             # three newlines
    '{\n' + ' ' * 21 + '"name": "Ada"}',  # an indent past 20
])
def test_flexible_bounds_runs(compiler, tokenizer, text):
    g = compiler.compile_json_schema(SCHEMA, whitespace="flexible")
    assert not feed(tokenizer, g, text)
    assert compiler.compile_json_schema(SCHEMA, whitespace="any").matcher().accept_string(text.strip().encode())


def test_standard_forces_the_space(compiler):
    g = compiler.compile_json_schema(SCHEMA, whitespace="standard", property_order="schema")
    m = g.matcher()
    assert m.find_jump_forward_string() == '{"name": "'
    assert m.accept_string(b'{"name": "Ada"')
    assert m.find_jump_forward_string() == ""          # `,` or `}` next
    assert m.accept_string(b",")
    assert m.find_jump_forward_string().startswith(' "')


@pytest.mark.parametrize("mode", ["standard", "flexible"])
def test_masks_agree_with_advance_on_random_walks(compiler, tokenizer, mode):
    """Every token a mask allows advances the matcher, along random walks through allowed tokens (the walks
    cross whitespace-run ends, where the mask and the byte parser must agree that no second run follows)."""
    g = compiler.compile_json_schema(SCHEMA, whitespace=mode)
    rng = random.Random(0)
    # a walk through the whitespace tokens first: bias towards tokens holding whitespace
    ws_tokens = {t for t, b in enumerate(g.index.token_bytes) if b and b.strip(b" \t\n") != b}
    for walk in range(6):
        m = g.matcher()
        for _ in range(40):
            if m.is_terminated():
                break
            allowed = np.flatnonzero(m.allowed_mask())
            allowed = allowed[allowed < g.vocab_size]
            if len(allowed) == 0:
                break
            for t in rng.sample(list(allowed), min(25, len(allowed))):
                assert m.copy().accept_token(int(t)), (mode, tokenizer.decode([int(t)]))
            pick = [int(t) for t in allowed if int(t) in ws_tokens]
            t = rng.choice(pick) if pick and rng.random() < 0.5 else int(rng.choice(list(allowed)))
            assert m.accept_token(t)


def test_closed_objects_in_generation(compiler, tokenizer):
    extra = {"name": "Ada", "zzz": 1}
    exact = compiler.compile_json_schema(SCHEMA, whitespace="compact")
    closed = compiler.compile_json_schema(SCHEMA, whitespace="compact", close_objects=True)
    compact = lambda v: json.dumps(v, separators=(",", ":"))   # noqa: E731
    assert feed(tokenizer, exact, compact(extra))
    assert not feed(tokenizer, closed, compact(extra))
    assert feed(tokenizer, closed, compact(VALUE))
    # said explicitly, other names stay allowed
    open_ = compiler.compile_json_schema({**SCHEMA, "additionalProperties": True}, whitespace="compact",
                                         close_objects=True)
    assert feed(tokenizer, open_, compact(extra))
    typed = compiler.compile_json_schema({**SCHEMA, "additionalProperties": {"type": "integer"}},
                                         whitespace="compact", close_objects=True)
    assert feed(tokenizer, typed, compact(extra))
    # an object that names no properties is a free-form object: closing it would leave only {}
    free = compiler.compile_json_schema({"type": "object"}, whitespace="compact", close_objects=True)
    assert feed(tokenizer, free, compact({"k": [1]}))
    # allOf merges, then closes: names from both branches, nothing else
    both = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                      {"properties": {"b": {"type": "integer"}}}]}
    merged = compiler.compile_json_schema(both, whitespace="compact", close_objects=True)
    assert feed(tokenizer, merged, '{"a":1,"b":2}')
    assert not feed(tokenizer, merged, '{"a":1,"c":2}')
    assert feed(tokenizer, compiler.compile_json_schema(both, whitespace="compact"), '{"a":1,"c":2}')


def test_printer_names_the_whitespace(compiler):
    assert "%after ':' ','" in str(compiler.compile_json_schema(SCHEMA, whitespace="standard"))
    assert "%ignore-once" in str(compiler.compile_json_schema(SCHEMA, whitespace="flexible"))


def test_standard_falls_back_to_compact_where_no_token_starts_with_a_space(toy):
    """A vocabulary that cannot spell the separator would leave an empty mask after every ':' (the request
    aborted as grammar_rejected): "standard" compiles as "compact" there."""
    from sglite.runtime.constrained import GrammarCompiler

    from .toy_vocab import ToyTokenizer

    class NoSpace(ToyTokenizer):
        name = "toy-no-space"

        def __init__(self):
            super().__init__()
            self._bytes = [b if not b.startswith(b" ") else b"~" for b in self._bytes]

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    g = GrammarCompiler(NoSpace()).compile_json_schema(schema, whitespace="standard")
    assert g.matcher().accept_string(b'{"a":1}')
    with_space = GrammarCompiler(toy).compile_json_schema(schema, whitespace="standard")
    m = with_space.matcher()
    assert m.accept_string(b'{"a": 1}') and not with_space.matcher().accept_string(b'{"a":1')
