"""GrammarMatcher.rollback(n): after k accepted tokens, rolling back n leaves exactly the state of a matcher that
accepted the first k - n (the same masks, acceptance, forced text and caps counted, and the same answers to every
later token), for every kind of grammar, across jump-forward, EOS and accept_string."""
from __future__ import annotations

import pytest
import torch

from sglite.runtime.constrained import jump_forward_tokens

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
                                           "tags": {"type": "array", "items": {"type": "integer"}}},
          "required": ["name"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
LARK = """start: pair ("," pair)*
pair: NAME "=" NUMBER
NAME: /[a-z]+/
NUMBER: /[0-9]+/
"""
GBNF = 'root ::= "(" item (" " item)* ")"\nitem ::= [a-z]+ | root\n'

KINDS = {
    "regex": (lambda c: c.compile_regex(r"(ab|cd)+-[0-9]{2,5}"), "abcdab-1234"),
    "json_schema": (lambda c: c.compile_json_schema(PERSON, whitespace="compact"),
                    '{"name":"Ann","tags":[1,22,333]}'),
    "lark": (lambda c: c.compile_grammar(LARK, "lark"), "alpha=12,beta=345,gamma=6"),
    "gbnf": (lambda c: c.compile_grammar(GBNF, "gbnf"), "(ab (cd ef) (g))"),
    "structural_tag": (lambda c: c.compile_structural_tag(
        {"structures": [{"begin": "<tool_call>", "schema": CITY, "end": "</tool_call>"}],
         "triggers": ["<tool_call>"]}, whitespace="compact"), 'Hi <tool_call>{"city":"Paris"}</tool_call> ok'),
}


def state(m) -> tuple:
    """What a matcher shows from outside: its mask (packed, as the engine reads it, and as bools), acceptance,
    termination, forced text and caps counted."""
    words = torch.zeros((1, m.grammar.words), dtype=torch.int32)
    m.fill_next_token_bitmask(words, 0)
    return (words.numpy().tobytes(), m.allowed_mask().tobytes(), m.is_accepting(), m.is_terminated(),
            m.find_jump_forward_string(), m.capped_values)


def same_future(a, b, tokens) -> None:
    """a and b answer alike to every one of `tokens` in turn (accepted or refused, then the state after)."""
    for t in tokens:
        assert a.accept_token(t) == b.accept_token(t)
        assert state(a) == state(b)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_rollback_restores_the_state_after_each_prefix(tokenizer, compiler, kind):
    make, text = KINDS[kind]
    g = make(compiler)
    toks = tokenizer.encode(text) + [tokenizer.eos_token_id]
    full = g.matcher()
    states = [state(full)]
    for t in toks:
        assert full.accept_token(t), (kind, tokenizer.decode([t]))
        states.append(state(full))
    assert full.is_terminated()
    assert len(set(states)) > 2                      # the states differ, so equal states below mean something
    for n in range(len(toks) + 1):
        m = full.copy()
        m.rollback(n)
        k = len(toks) - n
        assert state(m) == states[k], (kind, n)
        fresh = g.matcher()
        for t in toks[:k]:
            fresh.accept_token(t)
        same_future(m, fresh, toks[k:])
    assert full.is_terminated()                      # rolling back copies leaves the original as it was


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_rollback_in_steps_and_refused_tokens(tokenizer, compiler, kind):
    make, text = KINDS[kind]
    g = make(compiler)
    toks = tokenizer.encode(text)
    m = g.matcher()
    for t in toks:
        mask = m.allowed_mask()
        for r in [r for r in range(300) if not mask[r]][:3]:
            assert not m.accept_token(r)             # refused tokens are not steps
        assert m.accept_token(t)
    m.rollback(2)
    m.rollback(1)
    ref = g.matcher()
    for t in toks[:-3]:
        ref.accept_token(t)
    assert state(m) == state(ref)
    same_future(m, ref, toks[-3:])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_rollback_across_jump_forward(tokenizer, compiler, kind):
    """Tokens taken by jump-forward are accepted steps like any other and roll back the same way."""
    make, text = KINDS[kind]
    g = make(compiler)
    token_bytes = g.index.token_bytes
    m = g.matcher()
    states, jumped = [state(m)], 0
    rest = text.encode()
    while rest:
        jf = jump_forward_tokens(tokenizer, m)
        run = jf or tokenizer.encode(rest.decode())[:1]
        data = b"".join(token_bytes[t] for t in run)
        assert rest.startswith(data)
        for t in run:
            assert m.accept_token(t)
            states.append(state(m))
        jumped += len(jf)
        rest = rest[len(data):]
    for n in range(len(states) - 1, -1, -1):
        c = m.copy()
        c.rollback(len(states) - 1 - n)
        assert state(c) == states[n]
    if kind in ("json_schema", "structural_tag"):
        assert jumped > 0                            # these texts do go through forced text
    assert m.accept_token(tokenizer.eos_token_id)


def test_accept_string_is_one_step(tokenizer, compiler):
    g = compiler.compile_json_schema(PERSON, whitespace="compact")
    m = g.matcher()
    assert m.accept_string('{"name":"An')
    assert m.accept_string(b'n"')
    assert not m.accept_string('x')                  # refused: not a step
    m.rollback(1)
    assert m.find_jump_forward_string() == "" and state(m) == state(_after(g, '{"name":"An'))
    m.rollback(1)
    assert state(m) == state(g.matcher())


def _after(g, text: str):
    m = g.matcher()
    assert m.accept_string(text)
    return m


def test_rollback_bounds_and_reset(tokenizer, compiler):
    g = compiler.compile_regex("[a-z]+")
    m = g.matcher()
    toks = tokenizer.encode("hello")
    for t in toks:
        assert m.accept_token(t)
    with pytest.raises(ValueError, match=f"only {len(toks)} accepted"):
        m.rollback(len(toks) + 1)
    with pytest.raises(ValueError, match="count of tokens"):
        m.rollback(-1)
    m.rollback(0)
    assert m.accept_token(tokenizer.eos_token_id) and m.is_terminated()
    m.rollback(1)                                    # EOS taken back: no longer terminated
    assert not m.is_terminated() and m.is_accepting()
    m.reset()
    assert state(m) == state(g.matcher())
    with pytest.raises(ValueError, match="only 0 accepted"):
        m.rollback(1)


def test_copy_shares_history_but_not_state(tokenizer, compiler):
    g = compiler.compile_json_schema(PERSON)
    m = g.matcher()
    for t in tokenizer.encode('{"name": "Al"'):
        m.accept_token(t)
    before = state(m)
    c = m.copy()
    for t in tokenizer.encode(', "tags": [1'):
        assert c.accept_token(t)
    c.rollback(3)
    assert state(m) == before                        # the copy's moves never reach the original
    m.rollback(1)
    c2 = g.matcher()
    for t in tokenizer.encode('{"name": "Al"')[:-1]:
        c2.accept_token(t)
    assert state(m) == state(c2)


def test_each_verb_has_one_name():
    """xgrammar's verbs, each under one name: the earlier second names are gone."""
    from sglite.runtime.constrained import GrammarMatcher
    for verb in ("accept_token", "accept_string", "fill_next_token_bitmask", "is_terminated", "rollback", "reset",
                 "find_jump_forward_string"):
        assert callable(getattr(GrammarMatcher, verb))
    for old in ("advance", "fill_bitmask", "forced_text"):
        assert not hasattr(GrammarMatcher, old)
