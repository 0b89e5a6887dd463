"""`str(grammar)`: the grammar IR printed as rules, one per line, the same for equal inputs."""
from __future__ import annotations

import re

from sglite.runtime.constrained import GrammarCompiler

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3}},
    "required": ["name"], "additionalProperties": False}

RULE = re.compile(r"^(root|(lexeme|object|array|union|never)_\d+) ::= \S.*$")


def _rules(text: str) -> dict[str, str]:
    lines = text.splitlines()
    assert all(RULE.match(line) or line.startswith("%ignore ") for line in lines), text
    return dict(line.split(" ::= ", 1) for line in lines if " ::= " in line)


def test_schema_prints_one_rule_per_reachable_node(compiler):
    g = compiler.compile_json_schema(SCHEMA)
    text = str(g)
    rules = _rules(text)
    assert text.splitlines()[0].startswith("root ::= ")
    root = rules["root"]
    assert root.startswith('"{" members(') and root.endswith('"}"')
    # each property by name, optional ones marked, no other names (additionalProperties: false)
    assert '"name": lexeme_' in root and '"age"?: lexeme_' in root and '"tags"?: array_' in root
    assert "*:" not in root
    name_rule = re.search(r'"name": (\w+)', root).group(1)
    assert rules[name_rule] == "string (<= 20 chars)"
    age_rule = re.search(r'"age"\?: (\w+)', root).group(1)
    assert rules[age_rule] == "integer in [0, 120]"
    tags = rules[re.search(r'"tags"\?: (\w+)', root).group(1)]
    item = re.fullmatch(r'"\[" items\((\w+)\*\)\{,3\} "\]"', tags).group(1)
    assert sorted(rules[item].split(" | ")) == ['"\\"green\\""', '"\\"red\\""']   # one lexeme: the enum's strings
    assert text.splitlines()[-1] == "%ignore /[\\t\\n\\r ]+/"      # whitespace="any"
    # every rule is referenced from the root's closure, and every reference has a rule
    refs = set(re.findall(r"\b(?:lexeme|object|array|union|never)_\d+\b", text))
    assert refs == set(rules) - {"root"}


def test_printing_is_deterministic(tokenizer, compiler):
    other = GrammarCompiler(tokenizer)      # a fresh compiler: different caches, same IR
    assert str(compiler.compile_json_schema(SCHEMA)) == str(other.compile_json_schema(SCHEMA))
    compact = compiler.compile_json_schema(SCHEMA, whitespace="compact", property_order="schema")
    text = str(compact)
    assert "%ignore" not in text and text.splitlines()[0].endswith('"}" in order')
    assert text == str(other.compile_json_schema(SCHEMA, whitespace="compact", property_order="schema"))


def test_regex_prints_as_one_lexeme(compiler):
    assert str(compiler.compile_regex(r"[0-9]{4}-(ab|cd)")) == "root ::= /[0-9]{4}-(ab|cd)/"


def test_refs_and_any_value(compiler):
    tree = {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array",
                                                                         "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"}
    rules = _rules(str(compiler.compile_json_schema(tree)))
    root = rules["root"]         # the $ref slot: a one-way union
    obj = rules[root]
    assert obj.startswith('"{" members("kids"?: array_')
    kids = re.search(r'"kids"\?: (\w+)', obj).group(1)
    assert rules[kids] == '"[" items(root*) "]"'      # the recursion is a reference to the root
    anything = rules[re.search(r"\*: (\w+)", obj).group(1)]
    assert sorted(rules[a] for a in anything.split(" | ") if a.startswith("lexeme")) == \
        ['"null"', '"true" | "false"', "number", "string"]
