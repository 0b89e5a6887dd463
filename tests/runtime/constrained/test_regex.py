import pytest

from sglite.runtime.constrained import GrammarError

from .conftest import feed


@pytest.mark.parametrize("pattern,good,bad", [
    (r"[0-9]{3}-[a-z]+", ["123-abc", "000-x"], ["12-abc", "123-", "123-abc1"]),
    (r"(yes|no)", ["yes", "no"], ["y", "yesno", "maybe"]),
    (r"^\d+(\.\d+)?$", ["1", "3.14"], ["3.", ".5"]),
    (r"你好.世界", ["你好,世界", "你好 世界", "你好啊世界"], ["你好世界", "你好,,世界"]),
    (r"[α-ω]+", ["αβγ"], ["abc", ""]),
])
def test_regex_full_match(tokenizer, compiler, pattern, good, bad):
    g = compiler.compile_regex(pattern)
    for s in good:
        assert feed(tokenizer, g, s), s
    for s in bad:
        assert not feed(tokenizer, g, s), s


def test_multibyte_tokens_split_characters(tokenizer, compiler):
    # a token can end in the middle of a UTF-8 character; the DFA is byte-level so that must still work
    g = compiler.compile_regex("[中文]{2}")
    m = g.matcher()
    assert m.accept_string("中".encode()[:2])
    assert not m.is_accepting()
    assert m.accept_string("中".encode()[2:] + "文".encode())
    assert m.is_accepting()


@pytest.mark.parametrize("bad", ["(abc", "[a-", "a{2,1}"])
def test_malformed_regex(compiler, bad):
    with pytest.raises(GrammarError):
        compiler.compile_regex(bad)


def test_unsupported_regex_syntax(compiler):
    with pytest.raises(GrammarError, match="cannot handle|anchors"):
        compiler.compile_regex(r"(a)\1")


def test_regex_terminates_and_eos(tokenizer, compiler):
    g = compiler.compile_regex("ab")
    m = g.matcher()
    eos = tokenizer.eos_token_id
    assert not m.allowed_mask()[eos]
    assert not m.accept_token(eos)
    assert m.accept_string(b"ab")
    assert m.is_accepting() and m.is_terminated()
    mask = m.allowed_mask()
    assert mask[eos] and mask.sum() == 1
    assert m.accept_token(eos) and m.is_terminated()
    assert not m.allowed_mask().any()
