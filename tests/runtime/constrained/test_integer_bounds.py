"""Whole-number bounds of any size (`maximum: 10**1000`) are digit automata with O(digits) states: they compile
fast, and the exact matcher's verdict equals jsonschema's at the bounds, one off them, and on random lengths."""
import json
import random
import time
from decimal import Decimal

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglite.runtime.constrained import GrammarError
from sglite.runtime.constrained.automata.digit_range import digits_of, integer_range_fsm, number_range_fsm

PROPS = settings(derandomize=True, deadline=None, database=None, max_examples=40,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    return bool(m.accept_string(text.encode())) and m.is_accepting()


# jsonschema on exact values: fractions read as Decimal (a float rounds 1e40 + 0.5 to 1e40, and past 1e308 to inf),
# and an integral Decimal is an integer, as jsonschema counts an integral float
_EXACT = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: (isinstance(x, int) and not isinstance(x, bool))
        or (isinstance(x, Decimal) and x == x.to_integral_value())))


def _valid(schema: dict, text: str) -> bool:
    return _EXACT(schema).is_valid(json.loads(text, parse_float=Decimal))


def _texts(bounds, rnd: random.Random) -> list[str]:
    """Each bound and its neighbours in several spellings, and numbers of random lengths around them."""
    out = ["0", "-0", "0.0", "-0.0", "1", "-1", "0.5"]
    for b in bounds:
        for x in (b - 1, b, b + 1):
            digits = ("-" if x < 0 else "") + digits_of(abs(x))
            out += [digits, digits + ".0", digits + ".5", digits + ".000001"]
        length = len(digits_of(abs(b)))
        for n in (length - 1, length, length + 1, rnd.randint(1, length + 2)):
            if n >= 1:
                x = rnd.randint(10 ** (n - 1) if n > 1 else 0, 10 ** n - 1)
                out += [digits_of(x), "-" + digits_of(x)]
    return out


_big = st.one_of(st.integers(-10 ** 40, 10 ** 40),
                 st.integers(1, 400).map(lambda d: 10 ** d),
                 st.tuples(st.integers(1, 400), st.integers(-10 ** 6, 10 ** 6)).map(lambda p: 10 ** p[0] + p[1]),
                 st.tuples(st.integers(1, 400), st.integers(0, 10 ** 6)).map(lambda p: -(10 ** p[0]) - p[1]))


@PROPS
@given(lo=st.one_of(st.none(), _big), hi=st.one_of(st.none(), _big),
       lo_key=st.sampled_from(["minimum", "exclusiveMinimum"]), hi_key=st.sampled_from(["maximum", "exclusiveMaximum"]),
       kind=st.sampled_from(["integer", "number"]), seed=st.integers(0, 1000))
def test_big_bounds_agree_with_jsonschema(compiler, lo, hi, lo_key, hi_key, kind, seed):
    schema = {"type": kind}
    if lo is not None:
        schema[lo_key] = lo
    if hi is not None:
        schema[hi_key] = hi
    texts = _texts([b for b in (lo, hi) if b is not None] or [0], random.Random(seed))
    try:
        g = compiler.compile_json_schema(schema)
    except GrammarError as e:
        assert "admits no value" in str(e) and not any(_valid(schema, t) for t in texts)
        return
    for text in texts:
        assert _accepts(g, text) == _valid(schema, text), (schema, text[:60])


@pytest.mark.parametrize("schema", [
    {"type": "integer", "maximum": 10 ** 1000},
    {"type": "integer", "minimum": -10 ** 1000, "exclusiveMaximum": 10 ** 1000 + 3},
    {"type": "integer", "minimum": 10 ** 1000},
    {"type": "number", "exclusiveMinimum": -10 ** 1000, "maximum": 10 ** 999},
])
def test_a_thousand_digits_compile_fast_and_exactly(compiler, schema):
    t = time.monotonic()
    g = compiler.compile_json_schema(schema)
    g.matcher().allowed_mask()
    assert time.monotonic() - t < 3.0     # about 0.2-0.4 s on a quiet machine (bench/number_bounds.py)
    for text in _texts([v for k, v in schema.items() if k != "type"], random.Random(0)):
        assert _accepts(g, text) == _valid(schema, text), (schema, text[:60])


def test_states_grow_linearly_in_digits():
    sizes = [integer_range_fsm(-10 ** d - 17, 10 ** d + 5).num_states for d in (100, 200, 400, 800)]
    assert all(sizes[i + 1] < 2.1 * sizes[i] for i in range(3)) and sizes[-1] < 8 * 800, sizes


def test_multiple_of_with_huge_bounds(compiler):
    schema = {"type": "integer", "minimum": 10 ** 300, "maximum": 10 ** 300 + 50, "multipleOf": 7}
    g = compiler.compile_json_schema(schema)
    for x in range(10 ** 300 - 3, 10 ** 300 + 55):
        text = digits_of(x)
        assert _accepts(g, text) == _valid(schema, text)


def test_spellings_of_the_plain_automaton():
    """-0 is 0, a whole number may end in `.0+`, leading zeros are refused, an exclusive bound excludes only it."""
    f = integer_range_fsm(-5, 0)
    assert f.matches("-0") and f.matches("0.00") and f.matches("-5.0") and not f.matches("-6")
    assert not f.matches("-05") and not f.matches("00") and not f.matches("-0.5") and not f.matches("1")
    g = number_range_fsm(0, True, 10 ** 30, True)
    assert g.matches("0.001") and not g.matches("0") and not g.matches("-0") and not g.matches("0.000")
    assert g.matches(digits_of(10 ** 30 - 1) + ".99") and not g.matches(digits_of(10 ** 30))
    assert integer_range_fsm(3, 2) is None and number_range_fsm(2, True, 2, False) is None


def test_digits_past_the_string_conversion_limit():
    assert digits_of(10 ** 5000) == "1" + "0" * 5000
    f = integer_range_fsm(None, 10 ** 5000)
    assert f.matches("9" * 5000) and f.matches("1" + "0" * 5000) and not f.matches("1" + "0" * 4999 + "1")


def test_a_product_too_large_is_refused_before_it_is_built(compiler):
    from sglite.runtime.constrained import UnsupportedSchemaError
    with pytest.raises(UnsupportedSchemaError, match="multipleOf.*digit states"):
        compiler.compile_json_schema({"type": "integer", "maximum": 10 ** 1000, "multipleOf": 97})
    g = compiler.compile_json_schema({"type": "integer", "minimum": 3, "maximum": 10 ** 6, "multipleOf": 9999})
    assert _accepts(g, "9999") and not _accepts(g, "9998")   # short bounds: the product stays small
