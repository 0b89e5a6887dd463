"""A regex's large counted repetition of a character class is a counter in the parse frame, not unrolled states
(automata/regex_counter.py): it compiles to a handful of states, matches exactly the lengths re.fullmatch does,
its masks never allow a token that overshoots the count, an ambiguous count is unrolled when small and refused by
name when large, and JSON strings count exactly as before (ByteDFA.count derived from their boundaries)."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest
from sglite.runtime.constrained import GrammarCompiler
from sglite.runtime.constrained.automata.byte_dfa import ByteDFA
from sglite.runtime.constrained.automata.regex_counter import counted_regex
from sglite.runtime.constrained.budget import CompileBudgetExceeded


@pytest.fixture(scope="module")
def compiler(tokenizer):
    return GrammarCompiler(tokenizer)


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    return bool(m.accept_string(text.encode())) and m.is_accepting()


# the inputs, and the count each keeps: (pattern, min, max)
TABLE = [("a{0,5000}", 0, 5000), ("a{0,20000}", 0, 20000), ("a{0,100000}", 0, 100000),
         (r"[\s\S]{0,100000}", 0, 100000), ("(a{1,100}){1,100}", 1, 10000), ("b{0,6000}", 0, 6000),
         (r"\w{1,50}", 1, 50), (r"\w{1,5000}", 1, 5000), (r"^ID-\d{1,100000}$", 1, 100000),
         ('"[^"]{0,100000}"', 0, 100000), ("a{100000,}", 100000, None)]


@pytest.mark.parametrize("pattern, lo, hi", TABLE)
def test_large_counts_are_a_counter_of_few_states(compiler, pattern, lo, hi):
    node = compiler.compile_regex(pattern).ir.nodes[0]
    assert (node.min_chars, node.max_chars) == (lo, hi)
    assert node.dfa.num_states < 400          # a Unicode \w's UTF-8 states, not one per count


@pytest.mark.parametrize("pattern, char, lo, hi, frame", [
    ("a{0,100000}", "a", 0, 100000, ("", "")), ("b{0,6000}", "b", 0, 6000, ("", "")),
    (r"^ID-\d{1,100000}$", "7", 1, 100000, ("ID-", "")), (r"[\s\S]{0,100000}", "\n", 0, 100000, ("", "")),
    (r"\w{1,50}", "é", 1, 50, ("", "")), (r"\w{1,5000}", "日", 1, 5000, ("", "")),
    ('"[^"]{0,100000}"', "q", 0, 100000, ('"', '"')), ("(a{1,100}){1,100}", "a", 1, 10000, ("", "")),
    ("x[a-c]{300,500}y", "c", 300, 500, ("x", "y")), ("a{70000}", "a", 70000, 70000, ("", "")),
])
def test_the_count_is_exact_at_its_bounds(compiler, pattern, char, lo, hi, frame):
    g = compiler.compile_regex(pattern)
    for n in {0, 1, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1}:
        if n >= 0:
            text = frame[0] + char * n + frame[1]
            assert _accepts(g, text) == (lo <= n <= hi), (pattern, n)


@pytest.mark.parametrize("pattern", [
    "x[a-c]{0,80}y?", r"[ab]?\d{2,90}[a-z]{1,3}", r"(?:ab|c)\w{65,100}\.", "[^x]{0,70}x", r"\s{3,200}",
    r"(?i)k{66,99}", "(x|yz)[0-9a-f]{10,120}(-[0-9a-f]{4})?", "é{0,65}日",
])
def test_counted_regexes_agree_with_re_near_their_bounds(compiler, pattern):
    assert counted_regex(pattern) is not None        # these are counted, not unrolled
    g = compiler.compile_regex(pattern)
    rng = random.Random(pattern)
    alphabet = "abcxyz019_-.é日 \n\tKk"
    m = re.search(r"\{(\d+),(\d+)\}", pattern)
    lo, hi = int(m.group(1)), int(m.group(2))
    for n in (lo - 1, lo, lo + 1, hi - 1, hi, hi + 1):
        for _ in range(6):
            # a matching text when there is one of this length, else near one, and random edits of it
            body = "".join(rng.choice(alphabet) for _ in range(max(n, 0)))
            for text in (body, _nearly_matching(pattern, n, rng), body[:-1] + rng.choice(alphabet)):
                if text is None:
                    continue
                assert _accepts(g, text) == bool(re.fullmatch(pattern, text)), (pattern, n, text)


def _nearly_matching(pattern: str, n: int, rng: random.Random) -> str | None:
    """A text re.fullmatch accepts with the counted class read about n times, when the pattern's parts allow."""
    parts = {"x[a-c]{0,80}y?": ("x", "abc", "y"), r"[ab]?\d{2,90}[a-z]{1,3}": ("a", "0123456789", "q"),
             r"(?:ab|c)\w{65,100}\.": ("c", "w_9é", "."), "[^x]{0,70}x": ("", "ay日", "x"),
             r"\s{3,200}": ("", " \n\t", ""), r"(?i)k{66,99}": ("", "kK", ""),
             "(x|yz)[0-9a-f]{10,120}(-[0-9a-f]{4})?": ("yz", "0a9f", "-beef"), "é{0,65}日": ("", "é", "日")}
    pre, cls, post = parts[pattern]
    return pre + "".join(rng.choice(cls) for _ in range(max(n, 0))) + post


# (pattern, the texts that can still be completed to a match of it, as a regex)
PREFIXES = {"a{0,1000}": "a{0,1000}", r"x[a-c]{100,300}y": "(x[a-c]{0,300})?|x[a-c]{100,300}y",
            r"\w{1,70}": r"\w{0,70}", r"ID-\d{3,90}": r"(I|ID|ID-\d{0,90})?", r"ID-\d{1,100000}": r"(I|ID|ID-\d*)?",
            "a{0,100000}": "a*", r"\w{3,5000}!": r"\w*|\w{3,}!"}


@pytest.mark.parametrize("pattern", ["a{0,1000}", r"x[a-c]{100,300}y", r"\w{1,70}", r"ID-\d{3,90}"])
def test_masks_allow_exactly_the_tokens_that_keep_a_completion(compiler, tokenizer, pattern):
    """Near the count's bounds, a token is allowed iff the text after it can still be completed (PREFIXES), so
    no token overshoots the count and none that fits is lost."""
    g = compiler.compile_regex(pattern)
    index = compiler.index
    texts = [b.decode("utf-8", "ignore") for b in index.token_bytes]
    valid = [t for t, b in enumerate(index.token_bytes) if b and texts[t].encode() == b and t != index.eos_token_id]
    prefix = re.compile(PREFIXES[pattern])
    m = re.search(r"\{(\d+),(\d+)\}", pattern)
    lo, hi = int(m.group(1)), int(m.group(2))
    char = {"a{0,1000}": "a", r"x[a-c]{100,300}y": "b", r"\w{1,70}": "a", r"ID-\d{3,90}": "4"}[pattern]
    pre = {"a{0,1000}": "", r"x[a-c]{100,300}y": "x", r"\w{1,70}": "", r"ID-\d{3,90}": "ID-"}[pattern]
    for n in sorted({0, max(lo - 3, 0), lo, hi - 5, hi - 1, hi}):
        text = pre + char * n
        matcher = g.matcher()
        assert matcher.accept_string(text.encode())
        mask = matcher.allowed_mask()
        for t in valid:
            ok = prefix.fullmatch(text + texts[t]) is not None
            assert bool(mask[t]) == ok, (pattern, n, texts[t])
        eos = index.eos_token_id
        assert bool(mask[eos]) == bool(re.fullmatch(pattern, text)), (pattern, n)


def test_an_ambiguous_count_is_unrolled_when_small_and_refused_by_name_when_large(compiler):
    # the a* after the count reads the same characters: which of them the count read is unknown
    small = compiler.compile_regex("a{0,3000}a*b")
    assert not small.ir.nodes[0].counted
    for n in (0, 2999, 3000, 5000):
        assert _accepts(small, "a" * n + "b")
    with pytest.raises(CompileBudgetExceeded, match=r"\{0,30000\} cannot be kept as a counter"):
        compiler.compile_regex("a{0,30000}a*")
    with pytest.raises(CompileBudgetExceeded, match=r"\{0,30000\}"):
        compiler.compile_regex(r"\d{0,30000}[0-5]")
    # apart from what is next to it, the same count is exact
    g = compiler.compile_regex("a{0,30000}b*")
    assert g.ir.nodes[0].counted
    assert _accepts(g, "a" * 30000 + "bb") and not _accepts(g, "a" * 30001)


def test_two_large_counts_keep_one_counter_and_unroll_the_other(compiler):
    g = compiler.compile_regex("[a-f]{0,3000}-[0-9]{1,100000}")
    node = g.ir.nodes[0]
    assert (node.min_chars, node.max_chars) == (1, 100000)
    assert _accepts(g, "f" * 3000 + "-" + "1" * 100000)
    assert not _accepts(g, "f" * 3001 + "-1") and not _accepts(g, "-" + "1" * 100001)
    with pytest.raises(CompileBudgetExceeded, match=r"\{0,20000\}"):
        compiler.compile_regex("[a-f]{0,20000}-[0-9]{1,100000}")


def test_a_count_inside_an_alternation_or_a_repetition_is_not_a_counter():
    # the loop must be passed once by every match: these unroll (as before) or are refused by name
    assert counted_regex("(a{0,100}|b)") is None
    assert counted_regex("(x[0-9]{0,100})*") is None


def test_json_strings_count_as_before(compiler):
    plain = compiler.compile_json_schema({"type": "string", "maxLength": 3, "minLength": 2}).ir
    dfa = next(n.dfa for n in plain.nodes if getattr(n, "counted", False))
    expect = dfa.boundary[:, None] & (np.arange(256) != 0x22) & (dfa.table >= 0)
    assert (dfa.count == expect).all()
    g = compiler.compile_json_schema({"type": "string", "maxLength": 3, "minLength": 2})
    for text, ok in [('"ab"', True), ('"abc"', True), ('"a"', False), ('"abcd"', False), ('"\\u00e9\\n"', True),
                     ('"日本語"', True), ('"日本語x"', False)]:
        assert _accepts(g, text) == ok, text
    # a DFA's identity includes what it counts: the same table counted otherwise is another key
    table = np.full((1, 256), -1, np.int32)
    table[0, ord("a")] = 0
    a = ByteDFA(table.copy(), 0, np.array([True]), {}, np.array([True]))
    b = ByteDFA(table.copy(), 0, np.array([True]), {}, np.array([True]), np.zeros((1, 256), bool))
    assert a.key != b.key and a.count[0, ord("a")] and not b.count.any()


def test_a_pattern_in_a_string_with_a_length_bound_unrolls_or_is_refused(compiler):
    """JSON Schema `pattern` counts are not counters: the string's one counter is maxLength's (a second would be
    needed), so a pattern count is unrolled when small and refused by name when large."""
    g = compiler.compile_json_schema({"type": "string", "pattern": "^a{0,300}$", "maxLength": 250})
    assert _accepts(g, '"' + "a" * 250 + '"') and not _accepts(g, '"' + "a" * 251 + '"')
    g = compiler.compile_json_schema({"type": "string", "pattern": "^a{0,300}$"})
    assert _accepts(g, '"' + "a" * 300 + '"') and not _accepts(g, '"' + "a" * 301 + '"')
    with pytest.raises(Exception, match=r"\{0,90000\}"):
        compiler.compile_json_schema({"type": "string", "pattern": "^a{0,90000}$", "maxLength": 10})


@pytest.mark.parametrize("pattern", [r"ID-\d{1,100000}", "a{0,100000}", r"\w{3,5000}!"])
def test_generation_with_a_counted_regex_stays_valid(pattern):
    from sglite.runtime.engine import Engine
    from sglite.runtime.testing import load_tiny_model

    from sglite.protocol import GenerateRequest, SamplingParams

    with Engine(load_tiny_model(max_context=256), max_total_tokens=2048) as e:
        out = e.submit(GenerateRequest(text="hi", params=SamplingParams(regex=pattern, max_new_tokens=12)))[0]
        text = out.output().text
        assert re.fullmatch(PREFIXES[pattern], text), text
        if out.output().finish_reason.kind.value == "stop":
            assert re.fullmatch(pattern, text), text
