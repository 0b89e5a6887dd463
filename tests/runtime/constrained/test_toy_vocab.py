"""Masks over a toy vocabulary (toy_vocab.py: single bytes, tokens that straddle JSON structure, UTF-8 split
across tokens, special tokens) equal brute-force references at every prefix the tokens can reach: for a regex,
the `regex` module's partial matching; for a JSON Schema whose compact texts are finitely many, the texts
enumerated from a universe of values and kept where `jsonschema` says valid."""
from __future__ import annotations

import itertools
import json

import pytest

from sglite.runtime.constrained import jump_forward_tokens

from .toy_vocab import check_masks

regex_module = pytest.importorskip("regex")


# --- regex -------------------------------------------------------------------------------------------------------
def _utf8_split(data: bytes) -> tuple[str, bytes] | None:
    """(the complete characters, an unfinished last character's bytes), or None if `data` is not UTF-8."""
    try:
        return data.decode(), b""
    except UnicodeDecodeError as e:
        if e.reason != "unexpected end of data":
            return None
        return data[:e.start].decode(), data[e.start:]


def _completions(tail: bytes) -> list[str]:
    """Every character whose UTF-8 encoding starts with `tail` (a lead byte and some continuation bytes)."""
    n = 2 if tail[0] < 0xE0 else 3 if tail[0] < 0xF0 else 4
    lo = {2: 0x80, 3: 0x800, 4: 0x10000}[n]
    hi = {2: 0x7FF, 3: 0xFFFF, 4: 0x10FFFF}[n]
    return [chr(c) for c in range(lo, hi + 1) if not 0xD800 <= c <= 0xDFFF and chr(c).encode()[:len(tail)] == tail]


def regex_reference(pattern: str):
    rx = regex_module.compile(pattern)

    def viable(data: bytes) -> bool:
        split = _utf8_split(data)
        if split is None:
            return False
        text, tail = split
        if tail:
            return any(rx.fullmatch(text + ch, partial=True) for ch in _completions(tail))
        return rx.fullmatch(text, partial=True) is not None

    def complete(data: bytes) -> bool:
        split = _utf8_split(data)
        return split is not None and not split[1] and rx.fullmatch(split[0]) is not None
    return viable, complete


@pytest.mark.parametrize("pattern", [
    r"[a-c]+(x|yz)?[0-9]{2,3}",
    r"true|false|null",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r'"([^"\\]|\\.){0,3}"',
    r"(ab)*",                      # matches the empty text: EOS allowed at once
    "\u00e9+a|\u00e9b",            # a character split over two tokens (the pattern holds the character)
])
def test_regex_masks_equal_brute_force(toy, toy_compiler, pattern):
    checked = check_masks(toy, toy_compiler.compile_regex(pattern), *regex_reference(pattern), max_states=400)
    assert checked >= 5


# --- JSON Schema -------------------------------------------------------------------------------------------------
SCALARS = [True, False, None, "x", "yz", "ab"]


def objects(keys: list[str], values: list, max_keys: int) -> list[dict]:
    """Every object with up to `max_keys` of `keys` (in every order) and values from `values`."""
    out = []
    for k in range(max_keys + 1):
        for names in itertools.permutations(keys, k):
            for vals in itertools.product(values, repeat=k):
                out.append(dict(zip(names, vals)))
    return out


def arrays(values: list, max_len: int) -> list[list]:
    return [list(v) for n in range(max_len + 1) for v in itertools.product(values, repeat=n)]


def schema_reference(schema: dict, universe: list, order: list[str] | None = None):
    """(viable, complete, texts): the compact JSON texts of the values in `universe` valid under `schema` (with
    `order`: only those writing the top object's names in that order). `universe` must hold every valid value."""
    import jsonschema
    valid = jsonschema.Draft202012Validator(schema).is_valid
    texts = set()
    for v in universe:
        if valid(v) and (order is None or list(v) == sorted(v, key=order.index)):
            texts.add(json.dumps(v, separators=(",", ":")).encode())
    prefixes = {t[:i] for t in texts for i in range(len(t) + 1)}
    return prefixes.__contains__, texts.__contains__, texts


FLAT = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": ["x", "yz"]}, "c": {"type": "null"}},
        "required": ["a"], "additionalProperties": False}
ITEMS = {"type": "array", "items": {"anyOf": [{"type": "boolean"}, {"enum": ["ab", None]}]},
         "minItems": 1, "maxItems": 2}
NESTED = {"type": "object", "properties": {
    "p": {"type": "object", "properties": {"x": {"const": "yz"}}, "required": ["x"], "additionalProperties": False},
    "r": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}}, "additionalProperties": False,
    "minProperties": 1}
# schema -> a universe of values holding every valid one (and invalid ones: names, types, sizes it refuses)
CASES = {
    "flat": (FLAT, lambda: objects(["a", "b", "c", "z"], SCALARS, 4)),
    "items": (ITEMS, lambda: arrays(SCALARS, 3)),
    "nested": (NESTED, lambda: objects(["p", "r", "z"],
                                       [*SCALARS, {"x": "yz"}, {"x": "x"}, {}, *arrays([True, False], 3)], 3)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_schema_masks_equal_brute_force(toy, toy_compiler, case):
    schema, universe = CASES[case]
    viable, complete, texts = schema_reference(schema, universe())
    assert 10 <= len(texts) <= 1000
    for text in texts:          # the toy vocabulary can spell the whole language
        toy.encode(text.decode())
    g = toy_compiler.compile_json_schema(schema, whitespace="compact")
    assert check_masks(toy, g, viable, complete) >= 50


def test_ordered_properties_masks_equal_brute_force(toy, toy_compiler):
    viable, complete, texts = schema_reference(FLAT, objects(["a", "b", "c", "z"], SCALARS, 4), order=["a", "b", "c"])
    g = toy_compiler.compile_json_schema(FLAT, whitespace="compact", property_order="schema")
    assert check_masks(toy, g, viable, complete) >= 20
    assert b'{"a":true,"c":null}' in texts and b'{"c":null,"a":true}' not in texts


def test_jump_forward_on_toy_vocabulary(toy, toy_compiler):
    """Along every valid text: the forced tokens are allowed one after another and spell a prefix of the
    forced text."""
    _, _, texts = schema_reference(NESTED, objects(["p", "r"], [{"x": "yz"}, *arrays([True, False], 2)], 2))
    g = toy_compiler.compile_json_schema(NESTED, whitespace="compact")
    forced_some = 0
    for text in sorted(texts):
        m = g.matcher()
        for t in toy.encode(text.decode()):
            ids = jump_forward_tokens(toy, m)
            assert m.find_jump_forward_string().startswith(toy.decode(ids))
            c = m.copy()
            assert all(c.accept_token(i) for i in ids)
            forced_some += bool(ids)
            assert m.accept_token(t)
        assert m.is_accepting()
    assert forced_some > 0
