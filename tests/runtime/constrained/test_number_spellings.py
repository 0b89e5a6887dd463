"""Numbers compared by value under every number keyword the exact matcher enforces (minimum/maximum and their
exclusive forms, multipleOf, `not integer`): exponent spellings inside number_spellings' window are accepted
exactly when jsonschema accepts their value; outside the window they are refused; generation mode writes plain
digits. The automaton itself is checked against Decimal arithmetic on random spellings."""
import json
import random
import re
from decimal import Decimal, localcontext

import jsonschema
import pytest

from sglite.runtime.constrained.automata import number_spellings as ns
from sglite.runtime.constrained.automata.decimal_multiple import decimal_multiple_fsm
from sglite.runtime.constrained.automata.dfa_lowering import lower_char_fsm
from sglite.runtime.constrained.automata.intersect import intersect
from sglite.runtime.constrained.budget import CompileBudget, CompileBudgetExceeded, within
from sglite.runtime.constrained.ir.nodes import LexNode
from sglite.runtime.constrained.schema.numbers import _range_fsm


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    feed = getattr(m, "accept_string", None) or m.advance_bytes
    return bool(feed(text.encode())) and m.is_accepting()


def _valid(schema, text: str) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))


MULT_01 = {"type": "number", "multipleOf": 0.1}
RANGE_MULT = {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.1}
NOT_INT = {"not": {"type": "integer"}}
INT_MIN0 = {"type": "integer", "minimum": 0}
INT_RANGE = {"type": "integer", "minimum": -10**6, "maximum": 10**6}
POSITIVE = {"type": "number", "minimum": 0}
UNIT = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
MAX_100 = {"type": "number", "maximum": 100}
QUARTERS = {"type": "number", "multipleOf": 0.25, "maximum": 1000}

ACCEPTED = [
    # the cases
    (MULT_01, "1.1e1"), (INT_MIN0, "1e2"), (NOT_INT, "1e-05"),
    # what json.dumps writes for 1e16 and 1e-7, wherever the value is in range
    (POSITIVE, json.dumps(1e16)), (MULT_01, json.dumps(1e16)), (INT_MIN0, json.dumps(1e16)),
    (NOT_INT, json.dumps(1e-7)), (UNIT, json.dumps(1e-7)), (POSITIVE, json.dumps(1e-7)),
    # other spellings of in-range values: E, signs, leading zeros, needless fractions, the point moved left
    (RANGE_MULT, "1.1E+001"), (RANGE_MULT, "100e-2"), (RANGE_MULT, "0.05e+1"), (RANGE_MULT, "1e2"),
    (RANGE_MULT, "1.0e2"), (RANGE_MULT, "0e-20"), (RANGE_MULT, "-0.0e1"), (INT_RANGE, "-1e6"),
    (INT_RANGE, "1.5e1"), (INT_RANGE, "120e-1"), (INT_RANGE, "2.50E2"), (NOT_INT, "1.25e1"),
    (NOT_INT, "-3.5E-2"), (UNIT, "5e-1"), (UNIT, "9.99e-1"), (QUARTERS, "2.5e-1"), (QUARTERS, "1e3"),
    (QUARTERS, "-7.5e2"), (MAX_100, "-1e21"), ({"type": "number", "exclusiveMinimum": 1e-20}, "2e-20"),
    # scientific notation: below 1 with any digits after the point, whole with up to SCI_DIGITS
    (POSITIVE, "1.5e-05"), (NOT_INT, "1.25e-3"), (UNIT, "9.99999e-20"), (MAX_100, "-2.345E-7"),
    (INT_MIN0, "1.25e+20"), (POSITIVE, "3.5e16"), (QUARTERS, "-1.25e+20"),
]

REFUSED = [
    (MULT_01, "1.15e0"), (MULT_01, json.dumps(1e-7)), (INT_MIN0, "-1e2"), (INT_MIN0, "1.5e0"),
    (NOT_INT, "1e1"), (NOT_INT, "2.50e1"), (NOT_INT, json.dumps(1e16)), (MAX_100, json.dumps(1e16)),
    (RANGE_MULT, "1.01e2"), (RANGE_MULT, "1.001e1"), (RANGE_MULT, "-1e-1"), (INT_RANGE, "1.1e6"),
    (INT_RANGE, "1e-1"), (UNIT, "1e0"), (UNIT, "0e5"), (UNIT, "10e-1"), (QUARTERS, "1.1e-1"),
    (QUARTERS, "2e3"), ({"type": "number", "exclusiveMinimum": 1e-20}, "1e-20"),
    (INT_MIN0, "1.5e-05"), (UNIT, "-1.5e-05"), (MULT_01, "1.25e-3"), (NOT_INT, "1.25e+20"), (MAX_100, "1.5e+16"),
]


@pytest.mark.parametrize("schema,text", ACCEPTED)
def test_exponent_spellings_of_valid_values_accepted(compiler, schema, text):
    assert _valid(schema, text), "the oracle disagrees: not a valid case"
    assert _accepts(compiler.compile_json_schema(schema), text)


@pytest.mark.parametrize("schema,text", REFUSED)
def test_exponent_spellings_of_invalid_values_refused(compiler, schema, text):
    assert not _valid(schema, text), "the oracle disagrees: not an invalid case"
    assert not _accepts(compiler.compile_json_schema(schema), text)


@pytest.mark.parametrize("value", [1e16, 1e17, 3e18, 1e21, 1e-5, 1e-7, 5e-7, 1e-20, -1e16, -2e-9, 1.5e-05, 2.345e-07,
                                   -3.5e-09, 1.5e16, 1.25e20, 1.0000001e-15])
@pytest.mark.parametrize("schema", [POSITIVE, MAX_100, UNIT, NOT_INT, INT_MIN0, MULT_01, QUARTERS])
def test_json_dumps_floats_agree_with_jsonschema(compiler, schema, value):
    """json.dumps writes these floats with an exponent (1e+16, 1e-07, 1.5e-05, 1.25e+20): inside the window, so
    the verdict is jsonschema's on the same text."""
    text = json.dumps(value)
    assert "e" in text
    assert _accepts(compiler.compile_json_schema(schema), text) == _valid(schema, text), text


@pytest.mark.parametrize("schema,text", [
    (POSITIVE, "1e+22"), (POSITIVE, "1e-21"),            # past the far window
    (INT_MIN0, "1.234e+20"),                             # whole, more than SCI_DIGITS after the point
    (POSITIVE, "12.5e-7"), (NOT_INT, "0.5e-5"),          # far, not one non-zero digit before the point
    (INT_MIN0, "1000e-3"),                               # a near exponent with four integer digits
])
def test_outside_the_window_refused(compiler, schema, text):
    """The documented bound: valid values spelled outside the window are refused, never guessed at."""
    assert _valid(schema, text)
    assert not _accepts(compiler.compile_json_schema(schema), text)
    assert _accepts(compiler.compile_json_schema(schema), format(Decimal(text), "f"))    # in plain digits


@pytest.mark.parametrize("schema,plain,spelled", [(MULT_01, "11", "1.1e1"), (INT_MIN0, "100", "1e2"),
                                                  (NOT_INT, "0.5", "5e-1")])
def test_generation_mode_writes_plain_digits(compiler, schema, plain, spelled):
    g = compiler.compile_json_schema(schema, whitespace="compact")
    assert _accepts(g, plain) and not _accepts(g, spelled)


def _lexeme_states(grammar) -> int:
    return sum(n.dfa.num_states for n in grammar.ir.nodes if isinstance(n, LexNode))


@pytest.mark.parametrize("schema,limit", [(RANGE_MULT, 150), (INT_RANGE, 150), (NOT_INT, 250), (QUARTERS, 300)])
def test_automata_stay_small(compiler, schema, limit):
    assert _lexeme_states(compiler.compile_json_schema(schema)) <= limit


def test_budget_checkpoint_inside_the_construction():
    plain = lower_char_fsm(_range_fsm(0, False, 100, False), False)
    with within(CompileBudget(seconds=1e-9)), pytest.raises(CompileBudgetExceeded, match="exponent spellings"):
        ns.with_exponents(plain)


# --- the automaton against Decimal arithmetic ---------------------------------------------------------------------
_SPELLING = re.compile(r"-?([0-9]+)(\.[0-9]+)?[eE]([+-]?[0-9]+)")


def _in_window(text: str) -> bool:
    m = _SPELLING.fullmatch(text)
    if m is None:
        return True
    x = int(m.group(3))
    whole, frac = m.group(1), (m.group(2) or ".")[1:]
    near = ns.NEAR_MIN <= x <= ns.NEAR_MAX and len(whole) <= ns.INT_DIGITS
    far = ns.EXP_MIN <= x <= ns.EXP_MAX and len(whole) == 1 and set(frac) <= {"0"}
    # scientific notation: below 1 with any digits, or whole with at most SCI_DIGITS after the point
    scientific = len(whole) == 1 and whole != "0" and (
        ns.EXP_MIN <= x < 0 or len(frac) <= min(ns.SCI_DIGITS, x) and x <= ns.EXP_MAX)
    return near or far or scientific


def _random_spellings(n: int) -> list[str]:
    rng = random.Random(0)
    out = []
    for _ in range(n):
        i = rng.choice(["0", str(rng.randint(1, 9)), str(rng.randint(10, 999)), "100", "1000", str(rng.randint(1, 10**7))])
        f = rng.choice(["", "", ".0", ".5", ".05", ".1", "." + "".join(rng.choices("0123456789", k=rng.randint(1, 5)))])
        e = rng.choice(["", rng.choice("eE") + rng.choice(["", "+", "-"])
                        + rng.choice(["0", "00", "1", "2", "3", "07", "16", "5", "20", "21", "22"])])
        out.append(rng.choice(["", "-"]) + i + f + e)
    return out


CASES = {
    "[0, 100] multipleOf 0.1": (lambda: intersect(_range_fsm(0, False, 100, False), decimal_multiple_fsm(1, 1)),
                                lambda d: 0 <= d <= 100 and d * 10 == (d * 10).to_integral_value()),
    "not integer": (lambda: decimal_multiple_fsm(1, 0, multiple=False), lambda d: d != d.to_integral_value()),
    "minimum 0.5": (lambda: _range_fsm(0.5, False, None, False), lambda d: d >= Decimal("0.5")),
    "(0, 1)": (lambda: _range_fsm(0, True, 1, True), lambda d: 0 < d < 1),
    "maximum 1000 multipleOf 0.25": (
        lambda: intersect(_range_fsm(None, False, 1000, False), decimal_multiple_fsm(25, 2)),
        lambda d: d <= 1000 and d * 4 == (d * 4).to_integral_value()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_with_exponents_agrees_with_decimal_values(name):
    make, ok = CASES[name]
    dfa = ns.with_exponents(lower_char_fsm(make(), False))
    with localcontext() as ctx:
        ctx.prec = 100
        for text in _random_spellings(1500):
            expected = ok(Decimal(text)) and _in_window(text)
            assert dfa.match(text.encode()) == expected, (name, text, expected)


def test_past_the_state_limit_only_plain_spellings(tokenizer, monkeypatch):
    """Where the spellings' automaton would pass its limit, the lexeme keeps its plain spellings: the exponent
    spelling is refused (not accepted unchecked, not an error)."""
    from sglite.runtime.constrained import GrammarCompiler
    monkeypatch.setattr(ns, "MAX_STATES", 5)
    g = GrammarCompiler(tokenizer).compile_json_schema(MULT_01)
    assert _accepts(g, "11") and _accepts(g, "1.1") and not _accepts(g, "1.1e1")


# --- enum and const: the same window as every number path ---------------------------------------------------------
ENUM_MANY = {"enum": list(range(40)) + [2.5, 1e-7, 1e16, -0.125, "x"]}


@pytest.mark.parametrize("text", ["1e1", "3.9E1", "25e-1", "1e-07", "1.0e-7", "10000000000000000", "1e+16",
                                  "1.5e1", "39", "40", "4e1", "2.4e0", "-1.25e-1", "-0.125", "0e3", "-0.0",
                                  "1.25e-1", "3.95e1", "1e16", "1.00e16"])
def test_enums_of_many_numbers_agree_with_jsonschema(compiler, text):
    """Exponent spellings of enum members in the window (once only for up to 8 numbers, and another rule)."""
    assert _accepts(compiler.compile_json_schema(ENUM_MANY), text) == _valid(ENUM_MANY, text)


@pytest.mark.parametrize("value,accepted,refused", [
    (1e16, ["10000000000000000", "1e16", "1.0E+16", "10000000000000000.00"], ["1e15", "1.1e16"]),
    (1.5e-05, ["1.5e-05", "0.000015", "0.0000150", "1.50e-5"], ["1.5e-06", "0.00015"]),
    (0, ["0", "-0", "0.0", "0e7", "-0.0E-3"], ["1e-300", "0.1"]),
    (-12, ["-12", "-1.2e1", "-120e-1", "-12.0"], ["12", "-1.2e-1"]),
])
def test_const_numbers_by_value(compiler, value, accepted, refused):
    g = compiler.compile_json_schema({"const": value})
    for text in accepted:
        assert _accepts(g, text), text
    for text in refused:
        assert not _accepts(g, text), text
    plain = format(Decimal(repr(value)), "f")                 # generation mode writes plain digits
    assert _accepts(compiler.compile_json_schema({"const": value}, whitespace="compact"), plain)
