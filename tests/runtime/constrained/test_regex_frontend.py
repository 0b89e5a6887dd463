"""The regex front end (regex_nfa.py): Python's classes for compile_regex and grammar terminals, ECMA-262's for
JSON Schema `pattern`, the refusals that name the construct, and agreement with re.fullmatch on random regexes
over Unicode text, classes and counted repetitions."""
from __future__ import annotations

import bisect
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglite.runtime.constrained import GrammarError
from sglite.runtime.constrained.automata.regex import RegexUnsupported, regex_to_char_fsm
from sglite.runtime.constrained.automata.unicode_classes import class_ranges

from .conftest import feed


@pytest.mark.parametrize("pattern, good, bad", [
    (r"\w+", ["日本", "é", "a_1", "Ωmega"], ["", "a b", "日-本"]),
    (r"\d{2}", ["٣٤", "12", "१२"], ["1", "ab"]),
    (r"\s", ["\u2003", "\u3000", " ", "\x1c"], ["a", ""]),
    (r"[^\W\d]+", ["été"], ["é1"]),
    (r"(?a)\w+", ["abc_1"], ["é"]),
    (r"(?i)straße", ["STRAßE", "Straße"], ["strasse"]),
    (r"(?i)[a-c]k", ["BK", "b\u212a"], ["dk"]),              # U+212A KELVIN SIGN folds to k, as in re
    (r"(?i)[^a]", ["b"], ["a", "A"]),
    (r"(?s)a.b", ["a\nb"], []),
    (r"a.b", ["a日b"], ["a\nb"]),
])
def test_python_classes_and_flags_agree_with_re(pattern, good, bad):
    fsm = regex_to_char_fsm(pattern)
    for s in good:
        assert re.fullmatch(pattern, s) and fsm.matches(s), (pattern, s)
    for s in bad:
        assert not re.fullmatch(pattern, s) and not fsm.matches(s), (pattern, s)


def test_compile_regex_word_class_takes_unicode_letters(tokenizer, compiler):
    g = compiler.compile_regex(r"\w+")
    for s in ["日本", "é", "naïve_1"]:
        assert feed(tokenizer, g, s), s
    assert not feed(tokenizer, g, "a b")


def test_json_schema_pattern_reads_classes_as_ecma(tokenizer, compiler):
    word = compiler.compile_json_schema({"type": "string", "pattern": r"^\w+$"})
    assert feed(tokenizer, word, '"abc_1"')
    assert not feed(tokenizer, word, '"é"') and not feed(tokenizer, word, '"日本"')
    digit = regex_to_char_fsm(r"^\d$", True)
    assert digit.matches("7") and not digit.matches("٣")
    space = regex_to_char_fsm(r"^\s$", True)                # ECMA WhiteSpace and LineTerminator
    assert all(space.matches(c) for c in "\t\n\x0b\x0c\r \xa0\u1680\u2003\u2028\u2029\u202f\u3000\ufeff")
    assert not space.matches("\x1c") and not space.matches("\x85")   # Python's \s has them, ECMA's does not


@pytest.mark.parametrize("pattern, construct", [
    (r"(a)\1", "backreferences"), (r"(?=a)a", "lookaround"), (r"a(?<!b)", "lookaround"),
    (r"a\bb", "anchors"), (r"(?>ab)", "atomic"), (r"a*+", "possessive"), (r"(a)?(?(1)b|c)", "conditional"),
    (r"\p{L}", "Unicode property"),
])
def test_refusals_name_the_construct(pattern, construct):
    with pytest.raises(RegexUnsupported, match=construct):
        regex_to_char_fsm(pattern)


def test_empty_lookarounds_are_the_empty_set_and_the_empty_string():
    # (?!) is how a regex spells "nothing" (rx.NEVER prints so)
    assert not regex_to_char_fsm("(?!)").matches("") and not regex_to_char_fsm("(?!)").matches("a")
    assert regex_to_char_fsm("a(?!)|b").matches("b") and not regex_to_char_fsm("a(?!)|b").matches("a")
    assert regex_to_char_fsm("a(?=)b").matches("ab")


def test_malformed_regex_is_a_grammar_error():
    with pytest.raises(GrammarError, match="invalid regex"):
        regex_to_char_fsm("a{2,1}")


@pytest.mark.parametrize("letter", "dws")
def test_unicode_class_tables_agree_with_re(letter):
    spans = class_ranges(letter, "python")
    rng = random.Random(letter)
    points = [rng.randrange(0x110000) for _ in range(20_000)] + [a for a, _ in spans] + [b for _, b in spans]
    points += [a - 1 for a, _ in spans] + [b + 1 for _, b in spans]
    for c in points:
        if not 0 <= c <= 0x10FFFF or 0xD800 <= c <= 0xDFFF:
            continue
        i = bisect.bisect_right(spans, (c, 0x110000)) - 1
        inside = i >= 0 and spans[i][0] <= c <= spans[i][1]
        assert inside == bool(re.fullmatch(f"\\{letter}", chr(c))), (letter, hex(c))


# --- agreement with re.fullmatch on random regexes --------------------------------------------------------------
ALPHABET = "ab.é日٣ \n_Ω\u2003K\u212a"
_atoms = st.sampled_from(["a", "b", "é", "日", ".", r"\.", r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", "[ab]", "[^a]",
                          "[a-zé]", "[^\\w.]", r"[\d\s]", "[日-本]", "(?i:k)", "(?a:\\w)", " "])


def _regexes():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda p: f"{p[0]}|{p[1]}"),
            inner.map(lambda p: f"(?:{p})*"),
            inner.map(lambda p: f"(?:{p})+?"),
            inner.map(lambda p: f"(?:{p})?"),
            st.tuples(inner, st.integers(0, 4), st.integers(0, 4)).map(
                lambda p: f"(?:{p[0]}){{{min(p[1], p[2])},{max(p[1], p[2])}}}"),
            st.tuples(inner, st.integers(0, 3)).map(lambda p: f"(?:{p[0]}){{{p[1]},}}"),
        )
    return st.recursive(_atoms, extend, max_leaves=5)


@settings(derandomize=True, deadline=None, database=None, max_examples=250,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pattern=_regexes(), data=st.data())
def test_random_regexes_agree_with_re(pattern, data):
    fsm = regex_to_char_fsm(pattern)
    samples = [data.draw(st.from_regex(pattern, fullmatch=True).filter(lambda s: len(s) < 30)) for _ in range(3)]
    samples += [data.draw(st.text(ALPHABET, max_size=8)) for _ in range(6)]
    samples += [s[:-1] for s in samples if s] + [s + s[-1:] for s in samples]
    for s in samples:
        assert fsm.matches(s) == bool(re.fullmatch(pattern, s)), (pattern, s)
