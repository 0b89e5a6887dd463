"""Copy constraints (automata/grounding.py, the schema's x-sglite-span / x-sglite-number): a grounded string is
exactly a verbatim span of its source text, under every other keyword; a grounded number is one the text
writes (or reads with a scale, negated where allowed); bad sources are refused by name before any work."""
from __future__ import annotations

import json
import random

import pytest

from sglite.runtime.constrained import GrammarError, UnsupportedSchemaError
from sglite.runtime.constrained.automata.grounding import substring_fsm, written_numbers

from .conftest import accepts, feed

DOC = 'Northwind Robotics Inc. said "Q3" revenue rose 18% to $412.6 million;\n白鹭物流 净利润2.10亿元, a loss of 3.1.'


def span(schema: dict, text: str = DOC) -> dict:
    return {"type": "string", **schema, "x-sglite-span": {"text": text}}


def test_substring_automaton_is_exactly_the_substrings():
    rng = random.Random(0)
    for text in ["abracadabra", "aaaa", "ab\"c\n白鹭白", DOC]:
        fsm = substring_fsm(text)
        subs = {text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1)}
        for s in subs:
            assert fsm.matches(s), (text, s)
        assert not fsm.matches("")
        alphabet = sorted(set(text)) + ["z"]
        for _ in range(500):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
            assert fsm.matches(s) == (s in subs), (text, s)
        assert fsm.num_states <= 2 * len(text)


def test_a_span_field_takes_verbatim_spans_only(tokenizer, compiler):
    g = compiler.compile_json_schema(span({"maxLength": 30}), whitespace="compact")
    for good in ["Northwind Robotics Inc.", 'said "Q3"', "412.6 million;\n白鹭", "鹭物流", "a"]:
        assert accepts(tokenizer, g, good), good
    for bad in ["Northwind Robotics Ltd.", "northwind", "Robotics  Inc.", "", "Northwind Robotics Inc. said \"Q3\" re"]:
        assert not accepts(tokenizer, g, bad), bad          # not a span, empty, or past maxLength (31 chars)


def test_span_composes_with_pattern_and_the_exact_matcher(tokenizer, compiler):
    g = compiler.compile_json_schema(span({"pattern": "^[A-Z][a-z]+"}))       # "any": every JSON spelling
    assert accepts(tokenizer, g, "Northwind Rob") and not accepts(tokenizer, g, "orthwind")
    assert feed(tokenizer, g, '"Northwind\\u0020Robotics"')                 # an escaped space is the same text
    assert not feed(tokenizer, g, '"Northwind\\u0021"')


def test_written_numbers_as_written():
    assert written_numbers("EUR 1,284.5 m; FY2024 Q3: 0.84, -3 and 05 and 2.10亿") == \
        ["1284.5", "0.84", "-3", "5", "2.10"]


def test_a_grounded_number_is_one_the_text_writes(tokenizer, compiler):
    src = {"text": DOC}
    g = compiler.compile_json_schema({"type": "number", "x-sglite-number": src})
    for v in ["18", "412.6", "2.10", "3.1"]:
        assert feed(tokenizer, g, v), v
    for v in ["412.60", "412", "-3.1", "210", "19"]:
        assert not feed(tokenizer, g, v), v
    g = compiler.compile_json_schema({"type": "number", "minimum": 0,
                                      "x-sglite-number": {**src, "scales": [1, 100], "negate": True}})
    for v in ["210", "412.6", "41260", "1800"]:
        assert feed(tokenizer, g, v), v
    assert not feed(tokenizer, g, "-3.1") and not feed(tokenizer, g, "3100")    # minimum holds; no such scale
    g = compiler.compile_json_schema({"type": "integer", "x-sglite-number": src})
    assert feed(tokenizer, g, "18") and not feed(tokenizer, g, "412.6")


@pytest.mark.parametrize("schema,match", [
    ({"type": "string", "x-sglite-span": "report"}, "names the source 'report', which was not given"),
    ({"type": "string", "x-sglite-span": {"text": "  "}}, "source text is empty"),
    ({"type": "string", "x-sglite-span": {"txt": "a"}}, "must be a source name or"),
    ({"type": "integer", "x-sglite-span": {"text": "a"}}, "only on a schema of type string"),
    ({"type": "number", "x-sglite-number": {"text": "no figures here"}}, "writes no number the schema allows"),
    ({"type": "number", "x-sglite-number": {"text": "1.5", "scales": [0]}}, "scales must be"),
])
def test_bad_sources_are_refused_by_name(compiler, schema, match):
    with pytest.raises((GrammarError, UnsupportedSchemaError), match=match) as e:
        compiler.compile_json_schema({"type": "object", "properties": {"company": schema}})
    assert "#/properties/company" in str(e.value)


def test_grammars_are_cached_per_source(compiler):
    a = compiler.compile_json_schema(span({}, "alpha beta"))
    assert compiler.compile_json_schema(span({}, "alpha beta")) is a
    b = compiler.compile_json_schema(span({}, "gamma"))
    assert b is not a and json.dumps(b.spec).count("gamma")


def test_a_source_past_the_limit_is_refused_by_name(compiler):
    from sglite.runtime.constrained.automata.grounding import MAX_SOURCE_CHARS
    from sglite.runtime.constrained.automata.span_dfa import MAX_SPAN_CHARS
    with pytest.raises(GrammarError, match="more than the 48,000 a span constraint takes; split the document"):
        compiler.compile_json_schema(span({}, "x" * (MAX_SPAN_CHARS + 1)))
    with pytest.raises(GrammarError, match="more than the 8,000 a span under a pattern, format or minLength"):
        compiler.compile_json_schema(span({"pattern": "^N"}, "x" * (MAX_SOURCE_CHARS + 1)))


def test_a_long_source_takes_its_spans_in_any_spelling(tokenizer, compiler):
    """A 10k-token source (span_dfa.py's direct build): its spans, escaped or not, and nothing else."""
    doc = " ".join(f"Item {i}: revenue of {i * 7 % 1000}.{i % 10} million, \"segment {i % 13}\"\n净利润{i}亿元"
                    for i in range(700))
    assert len(tokenizer.encode(doc)) > 10_000
    g = compiler.compile_json_schema(span({"maxLength": 60}, doc), whitespace="compact")
    for i in (0, 350, 699):
        piece = doc[doc.index(f"Item {i}:"):][:40]
        assert accepts(tokenizer, g, piece), piece
    assert feed(tokenizer, g, '"segment 3\\"\\n"')                # " and a line break, escaped: a span still
    assert not accepts(tokenizer, g, "Item 700:") and not accepts(tokenizer, g, "revenue of 1000")
    assert not accepts(tokenizer, g, doc[:61])                          # past maxLength
    loose = compiler.compile_json_schema(span({}, doc), whitespace="any")
    assert feed(tokenizer, loose, '"\\u0049tem 12: revenue"')       # any JSON spelling in "any" mode


def test_the_direct_span_automaton_is_the_lowered_suffix_automaton():
    """span_dfa(text) and lowering substring_fsm(text) accept the same JSON strings, in both modes."""
    from sglite.runtime.constrained.automata.dfa_lowering import lower_char_fsm
    from sglite.runtime.constrained.automata.span_dfa import span_dfa
    rng = random.Random(1)
    for text in [DOC + ' \\ é😀/\t\x01\x7f', "abracadabra", "aaaa"]:
        for canonical in (True, False):
            fast, lowered = span_dfa(text, canonical), lower_char_fsm(substring_fsm(text), True, canonical)
            for _ in range(2000):
                i = rng.randrange(len(text))
                sub = text[i:rng.randrange(i, len(text) + 1)]
                if sub and rng.random() < 0.3:          # a near miss
                    k = rng.randrange(len(sub))
                    sub = sub[:k] + rng.choice(text + "xz") + sub[k + 1:]
                enc = json.dumps(sub, ensure_ascii=rng.random() < 0.5)
                if rng.random() < 0.3:                  # upper-case \u escapes
                    enc = '"' + "".join(f"\\u{ord(c):04X}" if ord(c) < 0x10000 and rng.random() < 0.5 else c
                                        for c in sub) + '"'
                data = enc.replace("/", "\\/" if rng.random() < 0.1 else "/").encode()
                assert fast.match(data) == lowered.match(data), (text, canonical, data)


UNITS = {"million": 1, "m": 1, "billion": 1000, "亿": 100, "万": 0.01}


def test_numbers_are_read_where_they_stand():
    from decimal import Decimal

    from sglite.runtime.constrained.automata.grounding import read_numbers
    text = ("Revenue of $1.92 billion, down 7%; a net loss of $12.4 million, or -$0.19 per share. 营业收入58.62亿元，"
            "同比下降3.1%；每股亏损0.09元，5,000万元. Revenue $412.6m over 12 months, 4% lower than last year.")
    got = read_numbers(text, UNITS, ["loss", "亏损", "down", "lower", "下降"])
    assert got == [Decimal(x) for x in ["1920", "-7", "-12.4", "-0.19", "5862", "-3.1", "-0.09", "50", "412.6",
                                        "12", "-4"]]
    # no words: each as written, once; `millions` is a plural of the unit, `mine` no unit at all
    assert read_numbers("3 millions, 3 mine, 3", UNITS, []) == [Decimal(3)]
    assert read_numbers("a loss of 2 and -2", {}, ["loss"]) == [Decimal(-2)]     # the written minus is not doubled


def test_a_number_read_in_place_is_the_only_reading(tokenizer, compiler):
    doc = "营业收入58.62亿元；净亏损1.28亿元。Revenue rose to $1.92 billion; EPS $0.35."
    g = compiler.compile_json_schema({"type": "number", "x-sglite-number": {
        "text": doc, "units": UNITS, "negative_words": ["亏损"]}})
    for v in ["5862", "-128", "1920", "0.35"]:
        assert feed(tokenizer, g, v), v
    for v in ["58.62", "1.28", "128", "1.92", "35", "-0.35"]:
        assert not feed(tokenizer, g, v), v
    g = compiler.compile_json_schema({"type": "number", "minimum": 0, "x-sglite-number": {
        "text": doc, "units": UNITS, "negative_words": ["亏损"]}})
    assert not feed(tokenizer, g, "-128") and feed(tokenizer, g, "5862")          # the schema's keywords hold


@pytest.mark.parametrize("option,match", [
    ({"units": {"亿": 0}}, "units must map unit words to positive factors"),
    ({"units": {"亿": 100}, "scales": [1]}, "scales .* cannot be combined with units/negative_words"),
    ({"negative_words": "loss"}, "negative_words must be a list of words"),
])
def test_bad_readings_are_refused_by_name(compiler, option, match):
    with pytest.raises(GrammarError, match=match) as e:
        compiler.compile_json_schema({"type": "object", "properties": {"revenue": {
            "type": "number", "x-sglite-number": {"text": "1.5 亿", **option}}}})
    assert "#/properties/revenue" in str(e.value)


def test_an_unresolved_term_field_is_refused(compiler):
    with pytest.raises(UnsupportedSchemaError, match="x-sglite-term.*#/properties/period.*becomes an enum"):
        compiler.compile_json_schema({"type": "object", "properties": {"period": {
            "type": "string", "x-sglite-term": {"source": "document", "kind": "period"}}}})


def test_decimal_commas_and_bracketed_losses():
    from decimal import Decimal

    from sglite.runtime.constrained.automata.grounding import read_numbers
    assert written_numbers("Umsatz von 4,8 Mrd. EUR, ein Plus von 6,5 %; 5.640 millones; 1 284 millions") == \
        ["4.8", "6.5", "5640", "1284"]
    assert written_numbers("EUR 1,284.5 m and 4,8") == ["1284.5", "4", "8"]     # a point decimal: commas group
    assert read_numbers("Net loss: (41.7)\nEPS: ($0.28); revenue 1,932.4 (Q4 2023: 1,900.1)", {}, ["loss"]) == \
        [Decimal(x) for x in ["-41.7", "-0.28", "1932.4", "1900.1"]]            # 2023 is a year
    assert read_numbers("Net result (41.7)", {}, []) == [Decimal("41.7")]      # brackets count with sign words only


def test_dates_are_not_figures_and_units_can_be_required():
    from decimal import Decimal

    from sglite.runtime.constrained.automata.grounding import read_numbers
    text = ("Six months to June 30, 2024 and 31 December 2024 (2024年6月30日): revenue 2,025 million, up 4.5%; "
            "EPS 18.7 pence; 3 new sites; FY 2023 revenue 2024 bn")
    assert read_numbers(text, {"million": 1, "bn": 1000, "pence": 0.01, "%": 1}, []) == \
        [Decimal(x) for x in ["2025", "4.5", "0.187", "3", "2024000"]]   # 2,025 is no year; a unit wins
    assert read_numbers(text, {"%": 1}, ["down"], unit_required=True) == [Decimal("4.5")]


def test_unit_required_needs_units(compiler):
    with pytest.raises(GrammarError, match="unit_required must be true or false, and true only with units"):
        compiler.compile_json_schema({"type": "number", "x-sglite-number": {"text": "4%", "unit_required": True}})
