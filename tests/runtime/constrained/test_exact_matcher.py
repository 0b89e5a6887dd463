"""The exact matcher (compile_json_schema's default whitespace="any") against JSON Schema's own rules: keys in
every JSON escape spelling, numbers compared by value, unknown formats refused; and generation mode writing
forced keys as the plainest JSON."""
import json
import re

import jsonschema
import pytest

from sglite.runtime.constrained import UnsupportedSchemaError


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    feed = getattr(m, "accept_string", None) or m.advance_bytes     # (the matcher's API is being renamed)
    return feed(text.encode()) and m.is_accepting()


@pytest.mark.parametrize("key", ["😀", "a😀b", "名前", "é", "\n", '"'])
def test_key_in_every_escape_spelling(compiler, key):
    schema = {"type": "object", "properties": {key: {"type": "integer"}}, "required": [key],
              "additionalProperties": False}
    g = compiler.compile_json_schema(schema)
    for text in (json.dumps({key: 1}), json.dumps({key: 1}, ensure_ascii=False),
                 re.sub(r"\\u[0-9a-f]{4}", lambda u: "\\u" + u.group()[2:].upper(), json.dumps({key: 1}))):
        assert jsonschema.validate(json.loads(text), schema) is None
        assert _accepts(g, text), text
    # a lone high surrogate, or one paired with the wrong low half, is another name
    if len(key) == 1 and ord(key) > 0xFFFF:
        high = json.dumps(key)[1:7]
        assert not _accepts(g, '{"%s\\udc00": 1}' % high)


def test_emoji_key_next_to_other_names(compiler):
    """With other names allowed, an escaped astral key still reaches its own property's schema."""
    g = compiler.compile_json_schema({"type": "object", "properties": {"😀": {"type": "integer"}}})
    assert _accepts(g, '{"\\ud83d\\ude00": 1}')
    assert not _accepts(g, '{"\\ud83d\\ude00": "x"}')
    assert _accepts(g, '{"\\ud83d\\ude01": "x"}')


@pytest.mark.parametrize("schema,text", [
    ({"type": "integer"}, "1e2"), ({"type": "integer"}, "1.0"), ({"type": "integer"}, "1.5e1"),
    ({"type": "integer"}, "100e-2"), ({"type": "integer"}, "-0.0E+3"), ({"type": "integer"}, "1.50E+001"),
    ({"enum": [1]}, "1e0"), ({"enum": [1]}, "1.0"), ({"enum": [1]}, "10E-1"), ({"enum": [1]}, "0.1e+1"),
    ({"const": 1}, "1e0"), ({"const": 0.5}, "5e-1"), ({"const": 1e-05}, "1e-05"), ({"const": -250}, "-2.5e2"),
    ({"enum": [1, 2.5, "x"]}, "25E-1"),
])
def test_numbers_compared_by_value(compiler, schema, text):
    jsonschema.validate(json.loads(text), schema)        # the reference's verdict: valid
    assert _accepts(compiler.compile_json_schema(schema), text)


@pytest.mark.parametrize("schema,text", [
    ({"type": "integer"}, "1.5e0"), ({"type": "integer"}, "15e-1"), ({"type": "integer"}, "1e-2"),
    ({"enum": [1]}, "1e1"), ({"const": 1}, "11e-1"), ({"const": 0.5}, "5e1"), ({"const": -250}, "2.5e2"),
])
def test_numbers_of_other_values_refused(compiler, schema, text):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(text), schema)
    assert not _accepts(compiler.compile_json_schema(schema), text)


def test_generation_mode_writes_plain_numbers(compiler):
    g = compiler.compile_json_schema({"const": 1}, whitespace="compact")
    assert not _accepts(g, "1e0") and _accepts(g, "1")


@pytest.mark.parametrize("schema,ptr", [
    ({"type": "string", "format": "no-such-format"}, "#"),
    ({"properties": {"a": {"format": "semver"}}}, "#/properties/a"),
    ({"type": "object", "properties": {"a": {"not": {"format": "slug"}}}}, "#/properties/a"),
])
def test_unknown_format_refused_by_name(compiler, schema, ptr):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile_json_schema(schema)
    fmt = json.dumps(schema)
    assert ptr in str(e.value)
    assert any(name in str(e.value) for name in ("no-such-format", "semver", "slug")), (fmt, str(e.value))


def test_format_on_a_number_is_moot(compiler):
    """`format` constrains strings only: an unknown one on an integer schema refuses nothing and is accepted."""
    g = compiler.compile_json_schema({"type": "integer", "format": "int32"})
    assert _accepts(g, "12")


@pytest.mark.parametrize("key", ["名前", "é", "😀", "a\nb", 'q"'])
def test_generation_forces_plainest_key(compiler, key):
    schema = {"type": "object", "properties": {key: {"type": "integer"}}, "required": [key]}
    for ws in ("compact", "standard"):
        g = compiler.compile_json_schema(schema, whitespace=ws, property_order="schema")
        m = g.matcher()
        forced = m.forced_bytes().decode("utf-8", "replace")
        assert forced.startswith("{" + json.dumps(key, ensure_ascii=False)[:-1]), (ws, forced)
        assert not _accepts(g, json.dumps({key: 1}, ensure_ascii=True)) or key.isascii()
