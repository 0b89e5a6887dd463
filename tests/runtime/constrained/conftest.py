"""Fixtures for constrained-decoding tests: one GrammarCompiler over the real SmolLM2 tokenizer (no model), and
one over a toy vocabulary of a few dozen tokens (toy_vocab.py)."""
from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="session")
def compiler(tokenizer):
    from sglite.runtime.constrained import GrammarCompiler
    return GrammarCompiler(tokenizer)


@pytest.fixture(scope="session")
def toy():
    from .toy_vocab import ToyTokenizer
    return ToyTokenizer()


@pytest.fixture(scope="session")
def toy_compiler(toy):
    from sglite.runtime.constrained import GrammarCompiler
    return GrammarCompiler(toy)


def feed(tokenizer, grammar, text: str) -> bool:
    """Feed `text` token by token, each checked against the mask; True if accepted with EOS allowed at the end."""
    m = grammar.matcher()
    for t in tokenizer.encode(text):
        allowed = bool(m.allowed_mask()[t])
        assert allowed == m.accept_token(t), f"mask and advance disagree on {tokenizer.decode([t])!r} in {text!r}"
        if not allowed:
            return False
    return m.is_accepting()


def accepts(tokenizer, grammar, instance) -> bool:
    return feed(tokenizer, grammar, json.dumps(instance))
