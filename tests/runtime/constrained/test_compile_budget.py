"""Every compile has a time and size budget: inputs that unroll or grow past it are refused within the budget,
naming the construct, and what fits compiles as before."""
from __future__ import annotations

import json
import time

import pytest

from sglite.runtime.constrained import GrammarCompiler, GrammarError
from sglite.runtime.constrained.automata.regex_size import check_unrolled_size
from sglite.runtime.constrained.budget import CompileBudget, CompileBudgetExceeded, checkpoint, within
from sglite.runtime.constrained.schema.size import check_schema_size


@pytest.fixture(scope="module")
def compiler(tokenizer):
    return GrammarCompiler(tokenizer)


def _nested_any_of(depth: int) -> dict:
    s: dict = {"type": "string"}
    for i in range(depth):
        s = {"anyOf": [s, {"type": "object", "properties": {f"k{i}": s}}]}
    return s


@pytest.mark.parametrize("pattern, construct", [
    # a class's count is kept as a counter (test_regex_counter.py): these are a sequence's count, an ambiguous
    # one, and two large ones (one counter only)
    ("x(ab|cd){30000}y", "{30000,30000}"), ("a{0,100000}a*", "{0,100000}"), ("a{0,20000}b{0,30000}", "{0,30000}"),
])
def test_counted_repetitions_past_the_budget_are_refused_at_once(compiler, pattern, construct):
    t = time.monotonic()
    with pytest.raises(CompileBudgetExceeded) as e:
        compiler.compile_regex(pattern)
    assert time.monotonic() - t < 1.0
    assert construct in str(e.value) and "10,000" in str(e.value)   # regex.MAX_REGEX_STATES; smaller counts
    # compile (tests/runtime/constrained/test_regex_counted.py)


@pytest.mark.parametrize("schema, where", [
    (_nested_any_of(16), "#/anyOf/"),
    ({"enum": [f"v{i}" for i in range(10_000)]}, "#/enum/"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x{0,90000}$"}}}, "{0,90000}"),
])
def test_schemas_past_the_budget_are_refused_within_it(compiler, schema, where):
    t = time.monotonic()
    with pytest.raises(CompileBudgetExceeded) as e:
        compiler.compile_json_schema(schema)
    assert time.monotonic() - t < compiler.budget.seconds + 0.5
    assert where in str(e.value)


@pytest.mark.parametrize("schema", [
    {"type": "array", "minItems": 1_000_000_007},
    {"type": "array", "items": {"type": "integer"}, "minItems": 10 ** 9, "maxItems": 2 * 10 ** 9},
])
def test_huge_item_counts_are_counted_not_unrolled(compiler, schema):
    t = time.monotonic()
    g = compiler.compile_json_schema(json.dumps(schema))
    assert g.matcher().allowed_mask() is not None
    assert time.monotonic() - t < 1.0
    m = g.matcher()
    assert m.accept_string(b"[1, 2, 3") and not m.is_accepting()   # far fewer items than the minimum
    assert not g.matcher().accept_string(b"[]")


def test_what_fits_still_compiles(compiler):
    for pattern in (r"\d{3}-\d{4}", "a{0,1500}", "[a-z]{2,63}", "(ab|cd){0,500}"):
        compiler.compile_regex(pattern)
    compiler.compile_json_schema({"enum": [f"v{i}" for i in range(1000)]})


def test_the_time_budget_stops_work_at_a_checkpoint():
    with within(CompileBudget(seconds=0.05)):
        time.sleep(0.06)
        with pytest.raises(CompileBudgetExceeded, match="0.05 s"):
            checkpoint("the test")
    checkpoint("outside any compile")   # no budget: never stops
    with within(CompileBudget(seconds=10)), within(CompileBudget(seconds=0.01)):
        time.sleep(0.02)
        with pytest.raises(CompileBudgetExceeded):
            checkpoint("nested")


def test_size_helpers_name_the_place():
    check_unrolled_size("a{0,10}b*", 20)
    with pytest.raises(CompileBudgetExceeded, match=r"\{2,30\}"):
        check_unrolled_size("(xy){2,30}", 20)
    with pytest.raises(CompileBudgetExceeded, match="#/properties/a/enum"):
        check_schema_size({"properties": {"a": {"enum": list(range(50))}}}, 40)
    with pytest.raises(ValueError):
        CompileBudget(seconds=0)


def test_the_engine_refuses_over_budget_naming_the_constraint():
    from sglite.protocol import GenerateRequest, RequestError, SamplingParams
    from sglite.runtime.engine import Engine
    from sglite.runtime.testing import load_tiny_model

    with Engine(load_tiny_model(max_context=256), max_total_tokens=2048, grammar_compile_budget_s=1.0) as e:
        with pytest.raises(RequestError) as err:
            e.submit(GenerateRequest(text="hi", params=SamplingParams(regex="(bc){0,60000}", max_new_tokens=4)))
        assert err.value.param == "regex" and err.value.code == "invalid_grammar"
        out = e.submit(GenerateRequest(text="hi", params=SamplingParams(regex="b{2,5}", max_new_tokens=8)))[0]
        assert 2 <= len(out.output().text) <= 5


def test_a_long_pattern_without_counted_repetition_is_not_refused_for_its_length():
    check_unrolled_size("|".join(f"w{i}" for i in range(2000)), 2048)   # as large as it is written
    with pytest.raises(CompileBudgetExceeded):
        check_unrolled_size("(" + "|".join(f"w{i}" for i in range(20)) + "){0,200}", 2048)


def test_thousands_of_keyword_alternatives_compile_as_a_word_set(compiler):
    t = time.monotonic()
    grammar = compiler.compile_grammar("root ::= " + " | ".join(f'"w{i}"' for i in range(2000)), "gbnf")
    assert time.monotonic() - t < 3.0                  # the general builder took 10-15 s
    for word, ok in [("w0", True), ("w1999", True), ("w2000", False), ("w", False), ("w01", False)]:
        m = grammar.matcher()
        assert (m.accept_string(word) and m.is_accepting()) == ok, word


def test_a_regex_written_larger_than_the_budget_is_refused_before_the_automaton_is_built(compiler):
    t = time.monotonic()
    with pytest.raises(GrammarError, match="rule 'root'.*positions, past the compile budget"):
        compiler.compile_grammar("root ::= " + " | ".join(f'"w{i}" [a-z]+' for i in range(2000)), "gbnf")
    assert time.monotonic() - t < 2.0
