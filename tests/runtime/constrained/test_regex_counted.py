"""Counted repetition costs the states the automaton needs, not n copies of everything: the large counts of a
server's pathological inputs compile (or are refused naming the count), and nested counts are exact."""
from __future__ import annotations

import re

import pytest

from sglite.runtime.constrained import GrammarCompiler
from sglite.runtime.constrained.automata.regex import MAX_REGEX_STATES, regex_to_char_fsm
from sglite.runtime.constrained.budget import CompileBudget, CompileBudgetExceeded


@pytest.fixture(scope="module")
def budgeted(tokenizer):
    return GrammarCompiler(tokenizer, budget=CompileBudget(seconds=20.0))   # generous: a busy 2-core machine


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    return bool(m.accept_string(text.encode())) and m.is_accepting()


@pytest.mark.parametrize("pattern, good, bad", [
    ("a{0,5000}", ["", "a" * 5000], ["a" * 5001, "b"]),
    (r"\d{1,20}", ["٣" * 20, "1"], ["1" * 21, ""]),
    ("(a{1,100}){1,100}", ["a", "a" * 10_000], ["", "a" * 10_001]),
    ("a{0,10000}", ["a" * 10_000], ["a" * 10_001]),
    (r"[\s\S]{0,3000}", ["日" * 3000, "", "\n"], ["x" * 3001]),
    ("x(ab|cd){2000}y", ["x" + "abcd" * 1000 + "y"], ["x" + "ab" * 1999 + "y"]),
])
def test_large_counts_compile_and_count_exactly(budgeted, pattern, good, bad):
    g = budgeted.compile_regex(pattern)
    assert g.matcher().allowed_mask() is not None
    for s in good:
        assert _accepts(g, s), (pattern, len(s))
    for s in bad:
        assert not _accepts(g, s), (pattern, len(s))


@pytest.mark.parametrize("pattern, construct", [
    # a class's large count is a counter (test_regex_counter.py), but not a sequence's, nor a second one
    ("(ab){0,20000}", "{0,20000}"), ("x(ab|c){0,50000}", "{0,50000}"), ("a{0,20000}[0-9]{0,20000}", "{0,20000}"),
    ("(ab|c){0,2000}(de){0,9000}", "{0,9000}"),
])
def test_counts_past_the_limit_are_refused_naming_them(budgeted, pattern, construct):
    with pytest.raises(CompileBudgetExceeded) as e:
        budgeted.compile_regex(pattern)
    assert construct in str(e.value) and f"{MAX_REGEX_STATES:,}" in str(e.value)


@pytest.mark.parametrize("pattern, bound", [
    ("a{0,5000}", 5001), ("(a{1,100}){1,100}", 10_001), ("(ab|c){0,2000}", 2 * 2000 + 1),
    ("(x[0-9]{1,3}){0,500}", 4 * 500 + 1), (r"\d{1,20}", 21),
])
def test_states_grow_linearly_in_the_count(pattern, bound):
    # nested optionals: a state of (ab|c){0,n} knows its copy and its place in it, never a set of copies
    assert regex_to_char_fsm(pattern).num_states <= bound


@pytest.mark.parametrize("pattern", [
    "(a{2,3}){0,2}", "(a{3}){2,3}", "(a{1,2}){2,}", "(?:a{0,2}){3}", "(?:[ab]{2}){1,3}c", "((ab){1,2}){2}",
    "(a{2,}){2,3}", "(?:a|bc){2,4}?", "(?:a{0}){5}b", "(?:[^a]{1,2}){2}",
])
def test_nested_counts_agree_with_re(pattern):
    fsm = regex_to_char_fsm(pattern)
    for text in ["", "c", "bc", "bcbc"] + ["a" * n for n in range(14)] + ["ab" * n for n in range(6)] + \
            ["b" * n + "c" for n in range(8)] + ["ba" * n for n in range(1, 4)]:
        assert fsm.matches(text) == bool(re.fullmatch(pattern, text)), (pattern, text)


def test_a_counted_class_is_a_state_per_count():
    # any character, up to 1,000 times: 1,001 states of two ranges each, however many code points they cover
    fsm = regex_to_char_fsm(r"[\s\S]{0,1000}")
    assert fsm.num_states == 1001
    assert all(len(row) == 2 for row in fsm.trans[:1000]) and fsm.trans[1000] == ()
