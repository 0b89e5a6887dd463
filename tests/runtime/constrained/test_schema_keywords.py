"""The JSON Schema keywords enforced by rewriting (schema/rewrite.py, negation.py, unevaluated.py, names.py,
array_keywords.py, decimal multipleOf): each instance goes through the matcher token by token and must agree
with `jsonschema` (the oracle); what cannot be enforced exactly is refused naming the keyword and pointer."""
import jsonschema
import pytest

from sglite.runtime.constrained import UnsupportedSchemaError

from .conftest import accepts

CASES = {
    "if_then_else": ({"if": {"type": "integer"}, "then": {"minimum": 10}, "else": {"type": "string", "maxLength": 2}},
                     [12, 3, "ab", "abc", 2.5, None, 10]),
    "if_then": ({"if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                 "then": {"required": ["x"]}},
                [{"kind": "a", "x": 1}, {"kind": "a"}, {"kind": "b"}, {}, 3]),
    "if_else": ({"if": {"maxLength": 3}, "else": {"pattern": "^z"}}, ["abc", "abcd", "zabcd", 5]),
    "not_bounds": ({"not": {"minimum": 3, "maximum": 7}}, [2, 3, 5, 7, 7.5, "x", None]),
    "not_pattern": ({"type": "string", "not": {"pattern": "^a+$"}}, ["a", "aa", "ab", "", "b"]),
    "not_integer": ({"type": "number", "not": {"type": "integer"}}, [1, 1.5, -0.25, 0, 3.0]),
    "not_required": ({"type": "object", "not": {"required": ["a", "b"]}},
                     [{"a": 1}, {"a": 1, "b": 2}, {}, {"b": 1, "c": 2}]),
    "not_const_object": ({"not": {"const": {"a": [1, 2]}}}, [{"a": [1, 2]}, {"a": [1]}, {"a": [1, 2], "b": 1},
                                                             {"a": [2, 1]}, {}, [1, 2], 1]),
    "not_enum_numbers": ({"type": "number", "not": {"enum": [1, 2.5]}}, [1, 1.0, 2.5, 2, 0, 3]),
    "not_anyOf": ({"not": {"anyOf": [{"type": "integer"}, {"minimum": 2}]}}, [1, 1.5, 2.5, "x", None]),
    "not_items": ({"not": {"prefixItems": [{"type": "string"}], "items": False}},
                  [["a"], [1], ["a", "b"], [], "x"]),
    "oneOf_overlap": ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 3, 2.5, 0.5, "x"]),
    "oneOf_required": ({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
                       [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {}]),
    "dependentSchemas": ({"type": "object", "dependentSchemas": {"a": {"required": ["b"],
                                                                       "properties": {"b": {"type": "integer"}}}}},
                         [{"a": 1, "b": 2}, {"a": 1}, {"a": 1, "b": "x"}, {"b": "x"}, {}]),
    "dependentRequired": ({"dependentRequired": {"a": ["b", "c"]}}, [{"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1},
                                                                     {"b": 1}, {}]),
    "propertyNames_pattern": ({"propertyNames": {"pattern": "^[a-c]+$", "maxLength": 3},
                               "properties": {"abcd": {}, "ab": {"type": "integer"}}},
                              [{"ab": 1}, {"ab": "x"}, {"abcd": 1}, {"ccc": None}, {"x": 1}, {}]),
    "propertyNames_enum": ({"propertyNames": {"enum": ["foo", "bar"]}, "additionalProperties": {"type": "string"}},
                           [{"foo": "x"}, {"foo": 1}, {"baz": "x"}, {"foo": "a", "bar": "b"}]),
    "propertyNames_not": ({"propertyNames": {"not": {"const": "id"}}}, [{"id": 1}, {"idx": 1}, {}]),
    "contains_trivial": ({"contains": True, "minContains": 2}, [[1], [1, 2], [], "x"]),
    "contains_none": ({"contains": {"type": "string"}, "minContains": 0, "maxContains": 0}, [[1, 2], [1, "a"], []]),
    "contains_bounded": ({"maxItems": 3, "contains": {"const": 1}, "minContains": 2},
                         [[1, 1], [1, 2, 1], [2, 1], [1, 1, 1], [1, 2, 3]]),
    "contains_bounded_max": ({"maxItems": 3, "contains": {"const": 1}, "maxContains": 1},
                             [[1], [1, 1], [2, 1, 2], [2], []]),
    "uniqueItems_booleans": ({"items": {"type": "boolean"}, "uniqueItems": True},
                             [[True], [True, False], [True, True], [], [False, True, False]]),
    "uniqueItems_enum": ({"prefixItems": [{"enum": [1, 2]}], "items": {"enum": [1, 2, "x"]}, "uniqueItems": True},
                         [[1, 2], [1, 1], [2, "x", 1], [1.0, 1], ["x"]]),
    "unevaluatedProperties": ({"properties": {"a": {}}, "allOf": [{"properties": {"b": {}}}],
                               "unevaluatedProperties": False},
                              [{"a": 1, "b": 2}, {"a": 1, "c": 3}, {}]),
    "unevaluatedProperties_anyOf": ({"anyOf": [{"properties": {"a": {"type": "string"}}},
                                               {"properties": {"b": {"type": "string"}}}],
                                     "unevaluatedProperties": False},
                                    [{"a": "x", "b": "y"}, {"a": 1, "b": "y"}, {"a": "x", "c": 1}, {}]),
    "unevaluatedProperties_if": ({"if": {"properties": {"k": {"const": 1}}, "required": ["k"]},
                                  "then": {"properties": {"x": {}}}, "else": {"properties": {"y": {}}},
                                  "unevaluatedProperties": False},
                                 [{"k": 1, "x": 1}, {"k": 1, "y": 1}, {"k": 2, "y": 1}, {"y": 1}, {"k": 2, "x": 1}]),
    "unevaluatedItems": ({"prefixItems": [{"type": "string"}], "anyOf": [{"prefixItems": [True, {"const": 1}]}, True],
                          "unevaluatedItems": {"type": "boolean"}},
                         [["a"], ["a", 1], ["a", True], ["a", 1, True], ["a", 1, 2], ["a", "b"]]),
    "unevaluatedItems_contains": ({"prefixItems": [True], "maxItems": 3, "contains": {"type": "string"},
                                   "unevaluatedItems": False},
                                  [[1, "a"], [1, "a", 2], [1], ["a"]]),
    "multipleOf_decimal": ({"type": "number", "multipleOf": 0.25, "maximum": 2},
                           [0.5, 0.75, 1, 1.25, 0.3, 2.25, -0.5, 0.125]),
    "multipleOf_decimal_integer": ({"type": "integer", "multipleOf": 1.5}, [3, 6, 4, 0, -9]),
    "not_multipleOf": ({"type": "number", "not": {"multipleOf": 0.5}}, [1, 1.5, 1.25, 2, 0.1]),
    "allOf_patterns": ({"allOf": [{"pattern": "a"}, {"pattern": "b"}], "type": "string"}, ["ab", "a", "b", "ba"]),
    "allOf_patternProperties": ({"allOf": [{"patternProperties": {"^x": {"type": "integer"}}},
                                           {"patternProperties": {"y$": {"minimum": 2}}, "properties": {"xy": {}}}]},
                                [{"xy": 2}, {"xy": 1}, {"xay": "s"}, {"xa": 1}, {"ay": 1}]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_keyword_matches_oracle(tokenizer, compiler, name):
    schema, instances = CASES[name]
    g = compiler.compile_json_schema(schema)
    oracle = jsonschema.Draft202012Validator(schema)
    got = {repr(i): accepts(tokenizer, g, i) for i in instances}
    want = {repr(i): oracle.is_valid(i) for i in instances}
    assert got == want
    assert any(want.values()) and not all(want.values()), "instances should include valid and invalid ones"


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"not": {"format": "email"}}, "not", "#/not"),
    ({"properties": {"a": {"not": {"additionalProperties": {"type": "string"}}}}}, "not", "#/properties/a/not"),
    ({"if": {"uniqueItems": True}, "then": {"maxItems": 3}}, "if", "#"),
    ({"oneOf": [{"type": "object", "additionalProperties": {"type": "string"}}, {"required": ["a"]}]}, "oneOf", "#"),
    ({"contains": {"format": "email"}, "maxContains": 1}, "contains", "#"),
    ({"items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "#"),
    ({"propertyNames": {"anyOf": [{"maxLength": 2}, {"pattern": "^x"}]}}, "propertyNames", "#/propertyNames"),
    ({"type": "number", "multipleOf": 12345.6789}, "multipleOf", "#"),
    ({"items": {"$dynamicRef": "#x"}}, "$dynamicRef", "#/items"),
])
def test_refusals_name_keyword_and_pointer(compiler, schema, keyword, pointer):
    with pytest.raises(UnsupportedSchemaError) as e:
        compiler.compile_json_schema(schema)
    assert e.value.keyword == keyword and e.value.pointer == pointer, str(e.value)
