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
