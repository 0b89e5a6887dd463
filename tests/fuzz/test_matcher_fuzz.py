"""Property-based fuzzing of the exact matcher: random regexes and JSON schemas drawn from a grammar of the
constructs we support. Each compile finishes within its budget or is refused cleanly (a GrammarError), and on
sampled strings and instances, valid and near-valid alike, the matcher's verdict equals re.fullmatch's or
jsonschema's. Derandomized with example counts sized so the file runs in well under two minutes."""
import json
import re
import time

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglite.runtime.constrained import GrammarCompiler, GrammarError, UnsupportedSchemaError
from sglite.runtime.constrained.budget import CompileBudget

BUDGET = CompileBudget(seconds=4.0)
# a compile may overrun its budget by the time between two checkpoints: allow a margin on a busy machine
BUDGET_SLACK_S = 2.0
FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def fuzz_compiler(tokenizer):
    return GrammarCompiler(tokenizer, budget=BUDGET)


def _verdict(grammar, text: str) -> bool:
    m = grammar.matcher()
    feed = getattr(m, "accept_string", None) or m.advance_bytes
    return bool(feed(text.encode("utf-8"))) and m.is_accepting()


def _compile(fn, *args, **kw):
    """The grammar, or None when refused cleanly; either way within the budget."""
    t0 = time.monotonic()
    try:
        return fn(*args, **kw)
    except (GrammarError, UnsupportedSchemaError):
        return None
    finally:
        assert time.monotonic() - t0 < BUDGET.seconds + BUDGET_SLACK_S


# --- regexes -------------------------------------------------------------------------------------------------
ALPHABET = "ab-.\n é0日٣_\u2003"
# \d, \w and \s read as Python's re reads them (Unicode): 日, ٣ and U+2003 are in them, and only there
_atoms = st.sampled_from(["a", "b", "é", "0", r"\.", "-", ".", "[ab]", "[^a]", "[a-c0-9]", "[é ]", " ", "日",
                          r"\w", r"\d", r"\s", r"\W", r"[\w-]", r"[^\d ]", r"(?a:\w)"])


def _regexes():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda p: f"{p[0]}|{p[1]}"),
            inner.map(lambda p: f"({p})"),
            inner.map(lambda p: f"(?:{p})*"),
            inner.map(lambda p: f"(?:{p})+"),
            inner.map(lambda p: f"(?:{p})?"),
            st.tuples(inner, st.integers(0, 3), st.integers(0, 3)).map(
                lambda p: f"(?:{p[0]}){{{min(p[1], p[2])},{max(p[1], p[2])}}}"),
            st.tuples(inner, st.integers(0, 3)).map(lambda p: f"(?:{p[0]}){{{p[1]}}}"),
            st.tuples(inner, st.integers(0, 3)).map(lambda p: f"(?:{p[0]}){{{p[1]},}}"),
        )
    return st.recursive(_atoms, extend, max_leaves=6)


def _near(draw, text: str) -> str:
    """`text` with one character inserted, deleted or replaced (or unchanged)."""
    if not text:
        return draw(st.text(ALPHABET, max_size=2))
    i = draw(st.integers(0, len(text) - 1))
    op = draw(st.sampled_from(["insert", "delete", "replace", "same"]))
    c = draw(st.sampled_from(ALPHABET))
    return {"insert": text[:i] + c + text[i:], "delete": text[:i] + text[i + 1:],
            "replace": text[:i] + c + text[i + 1:], "same": text}[op]


@settings(FUZZ, max_examples=60)
@given(pattern=_regexes(), data=st.data())
def test_regex_agrees_with_re(fuzz_compiler, pattern, data):
    g = _compile(fuzz_compiler.compile_regex, pattern)
    if g is None:
        return
    samples = [data.draw(st.from_regex(pattern, fullmatch=True).filter(lambda s: len(s) < 40)) for _ in range(3)]
    samples += [_near(data.draw, s) for s in samples]
    samples += [data.draw(st.text(ALPHABET, max_size=6))]
    for s in samples:
        assert _verdict(g, s) == bool(re.fullmatch(pattern, s)), (pattern, s)


_affix = st.tuples(_atoms, st.sampled_from(["", "?", "*", "+", "{2}"])).map("".join)


@settings(FUZZ, max_examples=15)
@given(prefix=st.lists(_affix, max_size=2).map("".join), atom=_atoms, lo=st.sampled_from([0, 1, 2, 65, 150]),
       width=st.integers(0, 200), suffix=st.lists(_affix, max_size=2).map("".join), data=st.data())
def test_large_counted_regex_agrees_with_re(fuzz_compiler, prefix, atom, lo, width, suffix, data):
    """A large count of a class between small parts (kept as a counter, or unrolled where ambiguous): texts with
    the class read at and around both bounds get re.fullmatch's verdict."""
    hi = max(lo + width, 65)
    pattern = f"{prefix}(?:{atom}){{{lo},{hi}}}{suffix}"
    g = _compile(fuzz_compiler.compile_regex, pattern)
    if g is None:
        return
    chars = st.from_regex(f"(?:{atom})", fullmatch=True)
    for n in (lo - 1, lo, lo + 1, hi - 1, hi, hi + 1):
        if n < 0:
            continue
        body = "".join(data.draw(st.lists(chars, min_size=n, max_size=n)))
        head = data.draw(st.from_regex(prefix, fullmatch=True)) if prefix else ""
        tail = data.draw(st.from_regex(suffix, fullmatch=True)) if suffix else ""
        for s in (head + body + tail, _near(data.draw, head + body + tail)):
            assert _verdict(g, s) == bool(re.fullmatch(pattern, s)), (pattern, len(s))


@pytest.mark.parametrize("pattern,text", [(r"\w+", "日本"), (r"\w", "é"), (r"\d", "٣"), (r"\s", "\u2003")])
def test_unicode_classes_read_as_python(fuzz_compiler, pattern, text):
    assert re.fullmatch(pattern, text)
    assert _verdict(fuzz_compiler.compile_regex(pattern), text)


# --- JSON schemas --------------------------------------------------------------------------------------------
KEYS = ["a", "b", "é", "😀"]
_small_int = st.integers(-3, 12)


def _leaf_schemas():
    return st.one_of(
        st.just({"type": "null"}), st.just({"type": "boolean"}),
        st.fixed_dictionaries({"type": st.just("integer")},
                              optional={"minimum": _small_int, "maximum": _small_int,
                                        "multipleOf": st.sampled_from([2, 3])}),
        st.fixed_dictionaries({"type": st.just("number")},
                              optional={"minimum": _small_int, "exclusiveMaximum": _small_int,
                                        "multipleOf": st.sampled_from([0.5, 0.25, 2])}),
        st.fixed_dictionaries({"type": st.just("string")},
                              optional={"minLength": st.integers(0, 3), "maxLength": st.integers(0, 4),
                                        "pattern": st.sampled_from(["^a", "b$", "^[ab]*$", "é"]),
                                        "format": st.sampled_from(["date", "ipv4", "uuid"])}),
        st.lists(st.one_of(_small_int, st.sampled_from(["a", "b", "😀", None, True, 1.5])), min_size=1,
                 max_size=4).map(lambda v: {"enum": v}),
        st.sampled_from([0, 1, "a", 2.5, None]).map(lambda v: {"const": v}),
    )


def _schemas():
    def extend(inner):
        return st.one_of(
            st.fixed_dictionaries({"type": st.just("array"), "items": inner},
                                  optional={"minItems": st.integers(0, 2), "maxItems": st.integers(0, 3)}),
            st.fixed_dictionaries({"type": st.just("object"),
                                   "properties": st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)},
                                  optional={"required": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
                                            "additionalProperties": st.one_of(st.booleans(), inner)}),
            st.lists(inner, min_size=2, max_size=3).map(lambda v: {"anyOf": v}),
            st.lists(inner, min_size=2, max_size=2).map(lambda v: {"allOf": v}),
            inner.map(lambda v: {"not": v}),
        )
    return st.recursive(_leaf_schemas(), extend, max_leaves=5)


# json.dumps writes exponents for floats from 1e16 up and below 1e-4 (1e+16, 2e-05): these are inside the exact
# matcher's window (automata/number_spellings.py); spellings outside it are covered by test_number_spellings
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _small_int, st.sampled_from([0.5, 1.5, 2.25, -0.5, 3.0]),
              st.sampled_from([1e16, -3e17, 1e21, 2e-05, 1e-07, -5e-20]),
              st.sampled_from(["", "a", "ab", "ba", "é", "😀", "2024-02-29", "1.2.3.4",
                               "123e4567-e89b-12d3-a456-426614174000"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
    max_leaves=6)


@pytest.mark.parametrize("schema,text", [({"type": "number", "multipleOf": 0.1}, "1.1e1"),
                                         ({"not": {"type": "integer"}}, "1e-05"),
                                         ({"type": "integer", "minimum": 0}, "1e2"),
                                         ({"type": "number", "minimum": 0}, json.dumps(1e16)),
                                         ({"not": {"type": "integer"}}, json.dumps(1e-7))])
def test_exponent_under_bounds(fuzz_compiler, schema, text):
    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    assert _verdict(fuzz_compiler.compile_json_schema(schema), text)


def _number_schemas():
    return st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["integer", "number"])},
                              optional={"minimum": _small_int, "maximum": _small_int,
                                        "exclusiveMinimum": st.sampled_from([-0.5, 0, 0.25]),
                                        "exclusiveMaximum": st.sampled_from([1, 7.5, 12]),
                                        "multipleOf": st.sampled_from([0.5, 0.25, 2, 3])}),
        st.just({"not": {"type": "integer"}}),
        st.sampled_from([0.5, 0.25, 2]).map(lambda k: {"not": {"type": "number", "multipleOf": k}}))


# numbers in exponent spellings inside the window, all of them exact binary fractions (as jsonschema compares
# floats): the point moved at most 2 places with up to 3 integer digits, or one significant digit up to 1e+21
_near_spelling = st.builds(lambda sign, i, f, e, x: f"{sign}{i}{f}{e}{x:+d}" if x else f"{sign}{i}{f}{e}0",
                           st.sampled_from(["", "-"]), st.sampled_from(["0", "1", "5", "12", "100", "250"]),
                           st.sampled_from(["", ".0", ".5", ".25", ".50"]), st.sampled_from(["e", "E"]),
                           st.integers(-2, 2))
_far_spelling = st.builds(lambda sign, d, z, x: f"{sign}{d}{z}e{x:+03d}", st.sampled_from(["", "-"]),
                          st.sampled_from("0125"), st.sampled_from(["", ".0"]), st.integers(-20, 21))


@settings(FUZZ, max_examples=150)
@given(schema=_number_schemas(), data=st.data())
def test_number_spellings_agree_with_jsonschema(fuzz_compiler, schema, data):
    g = _compile(fuzz_compiler.compile_json_schema, schema)
    if g is None:
        return
    validator = jsonschema.Draft202012Validator(schema)
    for _ in range(8):
        text = data.draw(st.one_of(_near_spelling, _far_spelling))
        assert _verdict(g, text) == validator.is_valid(json.loads(text)), (schema, text)


def _spellings(draw, value) -> list[str]:
    """The instance as json.dumps writes it (ASCII escapes), and in UTF-8 with no spaces."""
    return [json.dumps(value), json.dumps(value, ensure_ascii=False, separators=(",", ":"))]


@settings(FUZZ, max_examples=60)
@given(schema=_schemas(), data=st.data())
def test_schema_agrees_with_jsonschema(fuzz_compiler, schema, data):
    g = _compile(fuzz_compiler.compile_json_schema, schema)
    if g is None:
        return
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for _ in range(6):
        value = data.draw(_json)
        expected = validator.is_valid(value)
        for text in _spellings(data.draw, value):
            assert _verdict(g, text) == expected, (schema, text, expected)
