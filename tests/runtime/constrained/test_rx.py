"""Regex trees built in code (automata/rx.py): their automata match what Python's `re` matches for the text
they print as, trees are their own cache keys, and the lowerings that used to write regex text pass trees."""
from __future__ import annotations

import random
import re

from sglite.runtime.constrained.automata import rx
from sglite.runtime.constrained.automata.json_numbers import INTEGER, NUMBER, integer_with_exponent, number_bound

TREES = [
    NUMBER, INTEGER, integer_with_exponent(),
    number_bound(2.5, "ge"), number_bound(-0.125, "lt"), number_bound(0, "le"), number_bound(17.75, "gt"),
    rx.seq("a", rx.opt(rx.chars("+-")), rx.rep(rx.Cls(((0x30, 0x39),)), 2, 3)),
    rx.alt("null", "true", rx.seq("x", rx.star(rx.Cls(((0x61, 0x62),), True)))),
    rx.seq(rx.Lit("a.b[c]"), rx.plus(rx.alt("(", ")"))),
    rx.NEVER, rx.EMPTY,
]
ALPHABET = "0123456789-+.eEabxnultrc[]()\n "


def _texts(rng: random.Random, n: int) -> list[str]:
    out = ["", "0", "-0", "1.5", "2.5", "-0.125", "17.75", "1e5", "15e-1", "null", "true", "xab", "xq", "a+123"]
    for _ in range(n):
        out.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))))
    return out


def test_trees_match_what_their_printed_regex_matches():
    rng = random.Random(0)
    texts = _texts(rng, 1500)
    for t in TREES:
        fsm = rx.to_char_fsm(t)
        printed = re.compile(rx.show(t))
        for s in texts:
            assert fsm.matches(s) == bool(printed.fullmatch(s)), (rx.show(t), s)


def test_number_bounds_hold_numerically():
    rng = random.Random(1)
    for v, op in [(2.5, "ge"), (-0.125, "lt"), (0, "le"), (17.75, "gt"), (-3, "ge"), (0.001, "lt")]:
        fsm = rx.to_char_fsm(number_bound(v, op))
        for _ in range(400):
            x = round(rng.uniform(-30, 30), rng.randint(0, 4))
            text = repr(x) if "e" not in repr(x) else f"{x:f}"
            want = {"ge": x >= v, "gt": x > v, "le": x <= v, "lt": x < v}[op]
            assert fsm.matches(text) == want, (v, op, text)


def test_trees_are_their_own_keys():
    a = rx.seq("a", rx.star(rx.chars("bc")))
    b = rx.seq("a", rx.star(rx.chars("cb")))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert rx.Seq((rx.Lit("x"),)) != rx.Alt((rx.Lit("x"),))      # kinds never compare equal


def test_separators_and_gbnf_parts_are_built_from_trees(compiler):
    g = compiler.compile_json_schema({"type": "object"}, whitespace="flexible")
    assert "%ignore-once / |\\n\\n?[\\t ]{0,20}/" in str(g)
    gb = compiler.compile_grammar('root ::= [a-c]+ "." [0-9]{2}', "gbnf")
    m = gb.matcher()
    assert m.accept_string("abc.42") and m.is_accepting()
    assert not gb.matcher().accept_string("abd")
