"""JSON value equality (schema/json_values.py): json_key must agree with json_equal on every pair."""
import itertools

from sglite.runtime.constrained.schema.json_values import json_equal, json_key

VALUES = [None, True, False, 0, 1, 1.0, -0.0, 0.0, 2 ** 53, 2 ** 53 + 1, float(2 ** 53), 1.5, "1", "", "a",
          [], [1], [1.0], [True], [1, "a"], ["a", 1], {}, {"a": 1}, {"a": 1.0}, {"a": True}, {"b": 1},
          {"a": 1, "b": [1, {"c": None}]}, {"b": [1.0, {"c": None}], "a": 1}, {"b": [1, {"c": False}], "a": 1},
          [[1], {"a": []}], [[1.0], {"a": []}], [[1], {"a": [None]}]]


def test_json_key_agrees_with_json_equal():
    for a, b in itertools.product(VALUES, repeat=2):
        assert (json_key(a) == json_key(b)) == json_equal(a, b), (a, b)
        if json_equal(a, b):
            assert hash(json_key(a)) == hash(json_key(b)), (a, b)
