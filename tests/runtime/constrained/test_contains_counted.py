"""`contains` with minContains/maxContains in arrays of unbounded (or long) length: the ArrayNode counts the
items that match (schema/array_keywords.counted_array, parser._step_counted). Instances agree with jsonschema
as the oracle, and along random walks every token the mask allows advances and the walk can always end."""
from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest

from sglite.runtime.constrained import UnsupportedSchemaError

from .conftest import accepts

INT = {"type": "integer"}
CASES = {
    "min_default": ({"contains": INT}, [[], [1], ["a"], ["a", 1], ["a", "b"], [1.5, "x", 2], [{"a": 1}]]),
    "min_2": ({"contains": INT, "minContains": 2}, [[1], [1, 2], ["a", 1, "b"], ["a", 1, "b", 2], [1, 1, 1, 1]]),
    "min_max": ({"contains": INT, "minContains": 2, "maxContains": 3},
                [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], ["x", 1, 2, "y", 3, "z"], ["x", 1, 2, 3, 4, "y"], []]),
    "max_only": ({"contains": {"const": "a"}, "minContains": 0, "maxContains": 1},
                 [[], ["a"], ["a", "a"], ["b", "a", "c"], ["a", "b", "a"], [1, 2, 3]]),
    "with_items": ({"items": {"type": "number"}, "contains": {"minimum": 10}, "maxContains": 2},
                   [[1, 2], [11], [11, 12], [11, 12, 13], [1, "x", 11], [3.5, 10, 2, 10.5]]),
    "with_prefix": ({"prefixItems": [{"type": "string"}, INT], "contains": INT, "minContains": 2},
                    [["a", 1], ["a", 1, 2], [1, 2], ["a", 1, "b", 3], ["a", "b", 1, 2]]),
    "min_items": ({"minItems": 3, "contains": {"type": "string"}, "maxContains": 1},
                  [["a", 1, 2], ["a", "b", 1], [1, 2], [1, 2, 3], ["a", 1]]),
    "long_bounded": ({"maxItems": 12, "contains": INT, "minContains": 3, "maxContains": 5},
                     [[1, 2, 3], [1, 2], [1, 2, 3, 4, 5, 6], ["a"] * 9 + [1, 2, 3], ["a"] * 10 + [1, 2, 3]]),
    "nested": ({"type": "object", "properties": {"xs": {"type": "array", "contains": {"type": "array",
                                                                                     "contains": INT}}}},
               [{"xs": [[1]]}, {"xs": [["a"]]}, {"xs": [["a"], [2, "b"]]}, {"xs": []}, {}]),
    "ref_max": ({"$defs": {"i": INT}, "contains": {"$ref": "#/$defs/i"}, "maxContains": 2},
                [[1, 2], ["a", 1, "b", 2], [1, 2, 3], ["a"]]),
    "contains_false_items": ({"items": {"type": "string"}, "contains": INT}, [[], ["a"], [1]]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_counted_contains_against_jsonschema(compiler, tokenizer, name):
    schema, instances = CASES[name]
    g = compiler.compile_json_schema(schema)
    oracle = jsonschema.Draft202012Validator(schema)
    got = {repr(i): accepts(tokenizer, g, i) for i in instances}
    want = {repr(i): oracle.is_valid(i) for i in instances}
    assert got == want
    if name != "contains_false_items":
        assert any(want.values()) and not all(want.values()), "instances should include valid and invalid ones"


def test_counted_contains_refusals_name_keyword(compiler):
    with pytest.raises(UnsupportedSchemaError) as e:   # maxContains needs the complement of contains
        compiler.compile_json_schema({"items": {"type": "string"}, "contains": {"format": "email"}, "maxContains": 2})
    assert (e.value.keyword, e.value.pointer) == ("contains", "#")


@pytest.mark.parametrize("name", ["min_max", "with_prefix", "min_items", "long_bounded"])
def test_masks_on_random_walks_advance_and_end(compiler, tokenizer, name):
    """Every allowed token advances; a walk never reaches a state with no allowed token (no dead ends); walks
    that end (EOS) give instances the oracle accepts."""
    schema = CASES[name][0]
    g = compiler.compile_json_schema(schema, whitespace="compact")
    oracle = jsonschema.Draft202012Validator(schema)
    eos = g.index.eos_token_id
    rng = random.Random(1)
    # steer walks towards short items and ends, so that some finish within the step budget
    short = {t for t, b in enumerate(g.index.token_bytes) if b in (b"]", b",", b"1", b"2", b'"', b"a", b'",')}
    ended = 0
    for _ in range(12):
        m, ids = g.matcher(), []
        for _ in range(60):
            mask = m.allowed_mask()
            allowed = [int(t) for t in np.flatnonzero(mask)]
            assert allowed, f"dead end after {tokenizer.decode(ids)!r}"
            if eos in allowed and (allowed == [eos] or rng.random() < 0.5):
                assert m.accept_token(eos)
                ended += 1
                assert oracle.is_valid(json.loads(tokenizer.decode(ids))), tokenizer.decode(ids)
                break
            allowed = [t for t in allowed if t != eos]
            for t in rng.sample(allowed, min(20, len(allowed))):
                assert m.copy().accept_token(t), (tokenizer.decode(ids), tokenizer.decode([t]))
            pick = [t for t in allowed if t in short]
            t = rng.choice(pick) if pick and rng.random() < 0.8 else rng.choice(allowed)
            assert m.accept_token(t)
            ids.append(t)
    assert ended > 0


def test_no_dead_ends_where_the_count_cannot_be_met(compiler):
    """Slots running out (maxItems), or every item forced to match past maxContains: the mask refuses the
    byte that would lead there, not a later one."""
    g = compiler.compile_json_schema(CASES["long_bounded"][0], whitespace="compact")
    m = g.matcher()
    assert m.accept_string(b"[" + b'"a",' * 9)
    assert not m.copy().accept_string(b'"')        # 3 places left and 3 integers needed
    assert m.accept_string(b"1,2,3]") and m.is_accepting()
    tight = compiler.compile_json_schema({"items": INT, "contains": INT, "maxContains": 2, "minItems": 2},
                                         whitespace="compact")
    m = tight.matcher()
    assert m.accept_string(b"[1,2")
    assert not m.copy().accept_string(b",")         # a third integer would be a third match
    assert m.accept_string(b"]")
    never = compiler.compile_json_schema({"items": INT, "contains": INT, "maxContains": 2, "minItems": 3})
    assert not never.matcher().accept_string(b"[")


def test_generation_caps_leave_room_for_the_matches(compiler):
    """An items cap below what minContains needs is raised to make room (schema bounds win over caps)."""
    from sglite.runtime.constrained.ir.generation_caps import GenerationCaps

    schema = {"prefixItems": [{"type": "string"}], "contains": INT, "minContains": 3}
    g = compiler.compile_json_schema(schema, whitespace="compact", caps=GenerationCaps(max_array_items=2))
    m = g.matcher()
    assert m.accept_string(b'["a",1,2,3') and not m.copy().accept_string(b",")   # capped at 1 + 3 items
    assert m.accept_string(b"]") and m.is_accepting()
