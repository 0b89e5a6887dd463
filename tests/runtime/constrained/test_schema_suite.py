"""JSON Schema Test Suite (draft 2020-12) as an oracle: for every schema we compile, exactly the valid
instances must be accepted. Fast keyword files run by default; the whole suite is marked slow."""
import json

import pytest

from sglite.runtime.constrained import GrammarError, UnsupportedSchemaError

from .conftest import accepts

FAST = ["type", "required", "properties", "additionalProperties", "enum", "const", "items", "prefixItems",
        "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum", "exclusiveMaximum", "anyOf",
        "allOf", "boolean_schema", "maxProperties", "minProperties", "patternProperties", "pattern", "not"]
# known, documented deviations: leap seconds are accepted only at 23:59:60 UTC (Z / +00:00 / -00:00)
KNOWN = {("format:time", "validation of time strings"), ("format:date-time", "validation of date-time strings")}


def _suite(shared_data):
    return shared_data / "json-schema-test-suite" / "tests" / "draft2020-12"


def _check_file(tokenizer, compiler, path, name):
    wrong, compiled = [], 0
    for case in json.loads(path.read_text()):
        try:
            g = compiler.compile_json_schema(case["schema"])
        except (UnsupportedSchemaError, GrammarError):
            continue
        compiled += 1
        for t in case["tests"]:
            if accepts(tokenizer, g, t["data"]) != t["valid"]:
                if (name, case["description"]) in KNOWN and "leap second" in t["description"]:
                    continue
                wrong.append((case["description"], t["description"]))
    return compiled, wrong


@pytest.mark.parametrize("keyword", FAST)
def test_suite_keyword(tokenizer, compiler, shared_data, keyword):
    compiled, wrong = _check_file(tokenizer, compiler, _suite(shared_data) / f"{keyword}.json", keyword)
    assert not wrong, wrong


@pytest.mark.slow
def test_whole_suite(tokenizer, compiler, shared_data):
    suite = _suite(shared_data)
    files = [(p.stem, p) for p in sorted(suite.glob("*.json")) if p.stem != "format"]
    files += [(f"format:{f}", suite / "optional" / "format" / f"{f}.json")
              for f in ["date", "time", "date-time", "email", "uuid", "uri", "ipv4"]]
    bad = {}
    for name, path in files:
        _, wrong = _check_file(tokenizer, compiler, path, name)
        if wrong:
            bad[name] = wrong
    assert not bad, bad
