import json

import pytest

from sglite.runtime.constrained import GrammarError, UnsupportedSchemaError

from .conftest import accepts, feed

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "kind": {"enum": ["a", "b", 3, None]},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("inst,ok", [
    ({"name": "Bob", "age": 30}, True),
    ({"age": 30, "name": "Bob"}, True),                       # any property order
    ({"name": "Bob", "age": 30, "tags": ["x", "y"], "kind": 3}, True),
    ({"name": "Bob", "age": 30, "kind": None, "email": "a.b@c.org"}, True),
    ({"name": "中文名字", "age": 1}, True),                      # \\u escapes from json.dumps, counted as chars
    ({"name": "Bob"}, False),                                 # missing required
    ({"name": "", "age": 3}, False),                          # minLength
    ({"name": "123456789", "age": 3}, False),                 # maxLength
    ({"name": "Bob", "age": 151}, False),
    ({"name": "Bob", "age": -1}, False),
    ({"name": "Bob", "age": 3.5}, False),
    ({"name": "Bob", "age": 3, "x": 1}, False),               # additionalProperties false
    ({"name": "Bob", "age": 3, "tags": ["a", "b", "c", "d"]}, False),
    ({"name": "Bob", "age": 3, "kind": "c"}, False),
    ({"name": "Bob", "age": 3, "email": "not an email"}, False),
])
def test_person(tokenizer, compiler, inst, ok):
    g = compiler.compile_json_schema(PERSON)
    assert accepts(tokenizer, g, inst) == ok
    assert feed(tokenizer, g, json.dumps(inst, separators=(",", ":"))) == ok
    assert feed(tokenizer, g, json.dumps(inst, indent=2, ensure_ascii=False)) == ok


def test_additional_properties_default_true(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert accepts(tokenizer, g, {"a": 1, "b": {"c": [1, "x", None, {"d": True}]}})
    assert not accepts(tokenizer, g, {"a": "1"})
    assert not accepts(tokenizer, g, {"a": 1, "a2": 2, "a": 3} | {"a": "x"})


def test_additional_properties_schema(tokenizer, compiler):
    g = compiler.compile_json_schema({"properties": {"a": {}}, "additionalProperties": {"type": "boolean"}})
    assert accepts(tokenizer, g, {"a": "x", "b": True})
    assert not accepts(tokenizer, g, {"a": "x", "b": 1})
    assert accepts(tokenizer, g, 12)                # no "type": other kinds of value are valid


def test_recursive_ref(tokenizer, compiler):
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    g = compiler.compile_json_schema(tree)
    deep = {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": []}]}, {"value": 4}]}
    assert accepts(tokenizer, g, deep)
    assert not accepts(tokenizer, g, {"value": 1, "children": [{"children": []}]})
    assert len(g.nodes) < 50   # bounded: recursion is a cycle, not an unrolling


def test_any_of_all_of_one_of(tokenizer, compiler):
    g = compiler.compile_json_schema({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]})
    assert accepts(tokenizer, g, "ab") and accepts(tokenizer, g, 7)
    assert not accepts(tokenizer, g, "abc") and not accepts(tokenizer, g, 1.5)
    g = compiler.compile_json_schema({"allOf": [
        {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"a": {"minimum": 5}, "b": {"type": "string"}}, "additionalProperties": False}]})
    assert accepts(tokenizer, g, {"a": 5}) and accepts(tokenizer, g, {"a": 6, "b": "x"})
    assert not accepts(tokenizer, g, {"a": 4}) and not accepts(tokenizer, g, {"a": 5, "c": 1})
    # disjoint oneOf is enforced; overlapping oneOf only where the overlap can be excluded (see
    # test_schema_keywords.py), else it is refused
    g = compiler.compile_json_schema({"oneOf": [{"type": "string"}, {"type": "null"}]})
    assert accepts(tokenizer, g, None) and accepts(tokenizer, g, "x") and not accepts(tokenizer, g, 1)
    with pytest.raises(UnsupportedSchemaError, match="oneOf"):
        compiler.compile_json_schema({"oneOf": [{"type": "object", "additionalProperties": {"type": "string"}},
                                                {"required": ["a"]}]})


def test_const_and_enum_equality(tokenizer, compiler):
    g = compiler.compile_json_schema({"const": {"a": [1, "x"]}})
    assert accepts(tokenizer, g, {"a": [1.0, "x"]})
    assert not accepts(tokenizer, g, {"a": [1, "y"]}) and not accepts(tokenizer, g, {"a": [True, "x"]})
    g = compiler.compile_json_schema({"enum": ["é", 2]})
    assert accepts(tokenizer, g, "é") and feed(tokenizer, g, '"é"') and accepts(tokenizer, g, 2.0)


def test_an_enum_is_one_lexeme_per_kind(tokenizer, compiler):
    """An enum's strings share one lexeme (a trie) and its numbers another; the other values stay nodes."""
    from sglite.runtime.constrained.ir.nodes import LexNode, UnionNode
    values = ["a", "ab", "b\"q", "é", 1, 2.5, -3, None, True, {"k": "a"}, [1]]
    g = compiler.compile_json_schema({"enum": values})
    union = g.nodes[g.root]
    assert isinstance(union, UnionNode) and len(union.alts) == 6     # strings, numbers, null, true, object, array
    assert sum(isinstance(g.nodes[a], LexNode) for a in union.alts) == 4
    for v in values + [1.0, 2.50, -3.0]:
        assert accepts(tokenizer, g, v), v
    for v in ["", "abc", "b", "A", 0, 2.4, 3, False, {"k": "b"}, [2], {}]:
        assert not accepts(tokenizer, g, v), v


def test_object_shapes_share_one_key_dfa(tokenizer, compiler):
    """Objects with the same names (in any order) use the same immutable key DFA, across grammars."""
    a = compiler.compile_json_schema({"type": "object", "properties": {"x": {}, "y": {}},
                                      "additionalProperties": False})
    b = compiler.compile_json_schema({"type": "object", "properties": {"y": {"type": "integer"}, "x": {}},
                                      "additionalProperties": False, "required": ["y"]})
    assert a.parser.keys.dfa(a.root) is b.parser.keys.dfa(b.root)
    assert accepts(tokenizer, b, {"y": 1, "x": "s"}) and not accepts(tokenizer, b, {"x": 1})
    assert accepts(tokenizer, a, {"x": 1}) and not accepts(tokenizer, a, {"z": 1})


@pytest.mark.parametrize("fmt,good,bad", [
    ("date", "2024-02-29", "2023-02-29"),
    ("date-time", "2024-01-31T12:30:00Z", "2024-01-31 12:30"),
    ("time", "08:30:00+02:00", "8:30"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567"),
    ("ipv4", "192.168.0.1", "256.1.1.1"),
    ("uri", "https://example.com/a?b=c", "not a uri"),
])
def test_formats(tokenizer, compiler, fmt, good, bad):
    g = compiler.compile_json_schema({"type": "string", "format": fmt})
    assert accepts(tokenizer, g, good)
    assert not accepts(tokenizer, g, bad)


def test_pattern_is_a_search(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "string", "pattern": "b+c"})
    assert accepts(tokenizer, g, "aaabbcz") and not accepts(tokenizer, g, "ac")
    g = compiler.compile_json_schema({"type": "string", "pattern": "^a[0-9]$", "maxLength": 2})
    assert accepts(tokenizer, g, "a1") and not accepts(tokenizer, g, "a12")


def test_unsupported_keyword_names_keyword_and_pointer(compiler):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile_json_schema({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}})
    assert e.value.keyword == "uniqueItems" and e.value.pointer == "#/properties/x"
    assert "uniqueItems" in str(e.value) and "#/properties/x" in str(e.value)
    with pytest.raises(UnsupportedSchemaError, match="format"):
        compiler.compile_json_schema({"type": "string", "format": "hostname"})
    assert issubclass(UnsupportedSchemaError, ValueError)


@pytest.mark.parametrize("bad", ['{"type": ', {"type": "strin"}, {"minimum": "x"}, {"$ref": "#/nope"}])
def test_malformed_schema(compiler, bad):
    with pytest.raises(GrammarError):
        compiler.compile_json_schema(bad)


def test_pydantic_model(tokenizer, compiler):
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str
        price: float
        tags: list[str] = []

    g = compiler.compile_json_schema(Item)
    assert accepts(tokenizer, g, {"name": "a", "price": 1.5})
    assert not accepts(tokenizer, g, {"name": "a"})


def test_compact_whitespace(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}, whitespace="compact")
    assert feed(tokenizer, g, '{"a":1}')
    assert not feed(tokenizer, g, '{"a": 1}')
    assert g.matcher().find_jump_forward_string() == "{"           # "}" or '"' may follow
    g = compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                      "additionalProperties": False}, whitespace="compact")
    assert g.matcher().find_jump_forward_string() == '{"a":'


def test_unsatisfiable_parts_are_never_offered(tokenizer, compiler):
    # property "b" can never be valid, so the mask must not let the model start it
    g = compiler.compile_json_schema({"type": "object", "properties": {"b": False}, "additionalProperties": False},
                                     whitespace="compact")
    m = g.matcher()
    assert m.accept_string(b"{")
    assert m.find_jump_forward_string() == "}"


def test_pattern_with_max_length_has_no_dead_ends(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "string", "pattern": "^a+b$", "maxLength": 3})
    assert accepts(tokenizer, g, "ab") and accepts(tokenizer, g, "aab")
    assert not accepts(tokenizer, g, "aaab")
    m = compiler.compile_json_schema({"type": "string", "pattern": "^a+b$", "maxLength": 3},
                                     whitespace="compact").matcher()
    assert m.accept_string(b'"aa')
    assert m.find_jump_forward_string() == 'b"'           # a third 'a' would leave no room for the 'b'


def test_not_forms(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "string", "not": {"enum": ["red", "blue"]}})
    assert accepts(tokenizer, g, "green") and accepts(tokenizer, g, "redd") and accepts(tokenizer, g, "re")
    assert not accepts(tokenizer, g, "red") and not accepts(tokenizer, g, "blue")
    g = compiler.compile_json_schema({"not": {"type": ["string", "object"]}})
    assert accepts(tokenizer, g, 1) and accepts(tokenizer, g, [1]) and not accepts(tokenizer, g, "x")
    g = compiler.compile_json_schema({"type": "boolean", "not": {"const": False}})
    assert accepts(tokenizer, g, True) and not accepts(tokenizer, g, False)
    with pytest.raises(UnsupportedSchemaError, match="not"):
        compiler.compile_json_schema({"not": {"format": "email"}})


def test_one_of_disjoint_by_closed_objects(tokenizer, compiler):
    g = compiler.compile_json_schema({"oneOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
        {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"], "additionalProperties": False}]})
    assert accepts(tokenizer, g, {"a": "x"}) and accepts(tokenizer, g, {"b": "x"})
    assert not accepts(tokenizer, g, {"a": "x", "b": "y"})


def test_pattern_properties(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "object", "properties": {"x-id": {"type": "string"}},
                                      "patternProperties": {"^x-": {"type": "integer"}, "^[a-z]+$": {"type": "boolean"}},
                                      "additionalProperties": False})
    assert accepts(tokenizer, g, {"x-a": 1, "abc": True})
    assert not accepts(tokenizer, g, {"x-a": "1"}) and not accepts(tokenizer, g, {"abc": 1})
    assert not accepts(tokenizer, g, {"ABC": True})                  # matches nothing, additional false
    assert not accepts(tokenizer, g, {"x-id": "s"})                  # named and ^x-: must be string and integer
    g = compiler.compile_json_schema({"patternProperties": {"^n": {"type": "number"}}})
    assert accepts(tokenizer, g, {"n1": 1, "other": "x"}) and not accepts(tokenizer, g, {"n1": "x"})

    # only pattern properties can reach minProperties (regression: once compiled as admitting no value)
    g = compiler.compile_json_schema({"type": "object", "patternProperties": {"^p[0-9]$": {"type": "integer"}},
                                      "additionalProperties": False, "minProperties": 2, "maxProperties": 2})
    assert accepts(tokenizer, g, {"p1": 3, "p2": 4})
    assert not accepts(tokenizer, g, {"p1": 3}) and not accepts(tokenizer, g, {"p1": 3, "q": 4})


def test_multiple_of(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "integer", "multipleOf": 7, "minimum": 0})
    assert all(accepts(tokenizer, g, v) == (v % 7 == 0 and v >= 0) for v in range(-20, 60))
    g = compiler.compile_json_schema({"type": "number", "multipleOf": 5})
    assert accepts(tokenizer, g, -15) and accepts(tokenizer, g, 10.0) and not accepts(tokenizer, g, 2.5)
    with pytest.raises(UnsupportedSchemaError, match="multipleOf"):
        compiler.compile_json_schema({"type": "number", "multipleOf": 12345.6789})


def test_self_referencing_union_terminates(tokenizer, compiler):
    g = compiler.compile_json_schema({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}},
                                      "$ref": "#/$defs/a"})
    assert accepts(tokenizer, g, "x") and not accepts(tokenizer, g, 1)
    with pytest.raises(GrammarError, match="no value"):
        compiler.compile_json_schema({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})


def test_dependent_required(tokenizer, compiler):
    for kw in ("dependentRequired", "dependencies"):
        g = compiler.compile_json_schema({"type": "object", kw: {"card": ["billing"]}})
        assert accepts(tokenizer, g, {"card": 1, "billing": 2}) and accepts(tokenizer, g, {"billing": 2})
        assert accepts(tokenizer, g, {"x": 1}) and not accepts(tokenizer, g, {"card": 1})
    g = compiler.compile_json_schema({"type": "object", "properties": {"a": {}},
                                      "dependentRequired": {"a": ["b"]}, "additionalProperties": False})
    assert accepts(tokenizer, g, {}) and not accepts(tokenizer, g, {"a": 1})     # "b" can never be given


def test_fractional_number_bounds(tokenizer, compiler):
    g = compiler.compile_json_schema({"type": "number", "minimum": 0.5, "exclusiveMaximum": 99.95})
    for v, ok in [(0.5, True), (0.49, False), (1, True), (99.9, True), (99.95, False), (99.949, True),
                  (100, False), (-1, False), (0.51, True)]:
        assert accepts(tokenizer, g, v) == ok, v


def test_generation_mode_caps_digit_runs(compiler):
    """compact (generation) mode: at most NUMBER_DIGITS digits in a row in a number, so a model repeating a
    digit is made to end the number; "any" accepts every valid JSON number; strings are not capped."""
    from sglite.runtime.constrained.automata.digit_cap import NUMBER_DIGITS

    def ok(g, text):
        m = g.matcher()
        return m.accept_string(text.encode()) and m.is_accepting()

    k = NUMBER_DIGITS
    any_ws = compiler.compile_json_schema({"type": "number"})
    gen = compiler.compile_json_schema({"type": "number"}, whitespace="compact")
    for text in ("1" * k, "0." + "9" * k, "-1" + "0" * (k - 1) + "e" + "1" * k):
        assert ok(gen, text) and ok(any_ws, text)
    for text in ("1" * (k + 1), "0." + "9" * (k + 1), "1e" + "2" * (k + 1)):
        assert not ok(gen, text) and ok(any_ws, text)
    m = gen.matcher()
    assert m.accept_string(b"9" * k) and m.is_accepting()
    assert not any(m.copy().accept_string(d.encode()) for d in "0123456789")   # a 17th digit is masked
    # where the cap would leave no value, the number stays uncapped rather than failing
    big = compiler.compile_json_schema({"type": "integer", "minimum": 10 ** 20}, whitespace="compact")
    assert ok(big, str(10 ** 20)) and not ok(big, str(10 ** 20 - 1))
    s = compiler.compile_json_schema({"type": "object", "properties": {"s": {"type": "string"}}},
                                     whitespace="compact")
    assert ok(s, '{"s":"' + "1" * 40 + '"}')


def test_schema_property_order(compiler):
    """property_order="schema" (generation): named properties in schema order, optional ones skippable,
    required ones never; other names only after every required one; keys become forced text."""
    def ok(g, text):
        m = g.matcher()
        return m.accept_string(text.encode()) and m.is_accepting()

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                               "c": {"type": "boolean"}}, "required": ["a", "c"]}
    g = compiler.compile_json_schema(schema, whitespace="compact", property_order="schema")
    free = compiler.compile_json_schema(schema, whitespace="compact")
    for text, ordered in [('{"a":1,"c":true}', True), ('{"a":1,"b":"x","c":true}', True),
                          ('{"a":1,"c":true,"z":null}', True), ('{"c":true,"a":1}', False),
                          ('{"a":1,"c":true,"b":"x"}', False), ('{"a":1,"z":1,"c":true}', False)]:
        assert ok(g, text) == ordered and ok(free, text), text
    assert not ok(g, '{"a":1}') and not ok(free, '{"a":1}')
    assert g.matcher().forced_bytes() == b'{"a":' and free.matcher().forced_bytes() == b'{"'
    # minProperties stays reachable: an optional property skipped cannot strand the object
    g = compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"},
                                                                       "b": {"type": "integer"}},
                                      "minProperties": 2, "additionalProperties": False},
                                     whitespace="compact", property_order="schema")
    assert g.matcher().forced_bytes() == b'{"a":' and ok(g, '{"a":1,"b":2}') and not ok(g, '{"b":2}')
    with pytest.raises(ValueError, match="property_order"):
        compiler.compile_json_schema(schema, property_order="sorted")
    # the compile cache must not hand one key order's grammar to a schema listing the properties otherwise
    ab = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"]}
    ba = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
          "required": ["a", "b"]}
    first = compiler.compile_json_schema(ab, whitespace="compact", property_order="schema")
    second = compiler.compile_json_schema(ba, whitespace="compact", property_order="schema")
    assert first.matcher().forced_bytes() == b'{"a":' and second.matcher().forced_bytes() == b'{"b":'


def test_email_is_at_most_254_characters(tokenizer, compiler):
    """RFC 5321 bounds an address at 254 characters; a generated email cannot ramble past it."""
    g = compiler.compile_json_schema({"type": "string", "format": "email"})
    ok = "a" * 120 + "@" + "b" * 60 + "." + "c" * 60 + ".org"
    assert len(ok) == 246 and accepts(tokenizer, g, ok)
    assert not accepts(tokenizer, g, "a" * 250 + "@b.org")
    m = g.matcher()
    assert m.accept_string(b'"' + b"x" * 251)   # 3 characters left: one more, then "@" and a one-letter domain
    assert m.copy().accept_string(b'x@b"') and not m.copy().accept_string(b"xx")
    assert compiler.compile_json_schema({"type": "string", "format": "email", "maxLength": 10}) is not None
