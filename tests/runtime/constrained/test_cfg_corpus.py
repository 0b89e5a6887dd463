"""The grammar corpus (tests/runtime/data/grammars/: JSON, arithmetic, a SQL SELECT subset, CSV, a config
language; Lark, and GBNF twins of some) checked model-free through the SmolLM2 tokenizer: every case string is
fed token by token (mask and advance must agree at each token) and the matcher's verdict must equal lark's own
Earley parser's (lexer="dynamic_complete": every split into lexemes, as the matcher reads them), which must
equal the case's label. A GBNF twin is held to its Lark file's parser."""
from __future__ import annotations

import json
from pathlib import Path

import lark
import pytest

from .conftest import feed

DATA = Path(__file__).resolve().parent.parent / "data" / "grammars"
GRAMMARS = sorted(p.stem for p in DATA.glob("*.lark"))
SOURCES = [(name, syntax) for name in GRAMMARS for syntax in ("lark", "gbnf") if (DATA / f"{name}.{syntax}").exists()]


def lark_oracle(name: str) -> lark.Lark:
    return lark.Lark((DATA / f"{name}.lark").read_text(), parser="earley", lexer="dynamic_complete")


def lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def test_corpus_is_complete():
    assert set(GRAMMARS) >= {"json", "arith", "sql", "csv", "config"}
    assert sum(syntax == "gbnf" for _, syntax in SOURCES) >= 2


@pytest.mark.parametrize("name,syntax", SOURCES, ids=[f"{n}.{s}" for n, s in SOURCES])
def test_matcher_agrees_with_lark(tokenizer, compiler, name, syntax):
    cases = json.loads((DATA / f"{name}.cases.json").read_text())
    assert len(cases["valid"]) >= 5 and len(cases["invalid"]) >= 5
    oracle = lark_oracle(name)
    grammar = compiler.compile_grammar((DATA / f"{name}.{syntax}").read_text(), syntax)
    for label, texts in (("valid", cases["valid"]), ("invalid", cases["invalid"])):
        for text in texts:
            expected = lark_accepts(oracle, text)
            assert expected == (label == "valid"), f"the corpus labels {text!r} {label}, lark disagrees"
            assert feed(tokenizer, grammar, text) == expected, f"{name}.{syntax} on {text!r}: lark says {expected}"


@pytest.mark.parametrize("name", ["json", "sql"])
def test_masks_are_every_token_the_parser_reads(tokenizer, compiler, name):
    """With the real vocabulary, the mask at each of the first four positions along two valid strings is exactly the text tokens
    whose bytes the parser can read from the stacks there (read byte by byte down the vocabulary trie): the leaving-token
    shortcuts (whole subtrees after a lexeme's accepting node, rests shared between tokens) add and drop
    nothing."""
    import numpy as np
    cases = json.loads((DATA / f"{name}.cases.json").read_text())
    grammar = compiler.compile_grammar((DATA / f"{name}.lark").read_text(), "lark")
    index = compiler.index
    checked = 0
    for text in [v for v in cases["valid"] if len(tokenizer.encode(v)) >= 6][:2]:
        m = grammar.matcher()
        for k, t in enumerate(tokenizer.encode(text)[:4]):
            want = np.zeros(index.vocab_size, bool)
            todo = [(0, list(m._stacks))]      # the vocabulary trie, byte by byte, while some stack reads on
            while todo:
                node, stacks = todo.pop()
                for b, child in index.children[node].items():
                    after = grammar.run(stacks, bytes((b,)))
                    if after:
                        want[list(index.ends[child])] = True
                        todo.append((child, after))
            got = m.allowed_mask()
            got[index.eos_token_id] = False
            assert (got == want).all(), (text, k, np.flatnonzero(got != want)[:10])
            checked += 1
            assert m.accept_token(t)
    assert checked == 8
