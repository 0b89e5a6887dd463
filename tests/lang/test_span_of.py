"""gen(span_of=text): free text that is a verbatim span of `text`, in any tokenisation, through the runtime, the
server's body and the OpenAI backend's sglite flavour; bad texts fail before any work, naming the field."""
from __future__ import annotations

import pytest

import sglite as sgl
from sglite.protocol import RequestError, SamplingParams

REPORT = ('Acme Widgets Ltd. said "record" revenue of 512.3 million;\nCEO Jane Roe: 白鹭物流 净利润2.10亿元 '
          'and a loss of 3.1 in Q4.')


def test_generated_text_is_a_span_of_the_source(tiny_runtime):
    @sgl.function
    def prog(s):
        s += "Report: " + REPORT + "\nThe company: "
        s += sgl.gen("name", max_tokens=24, span_of=REPORT, temperature=1.0)

    seen = set()
    for seed in range(6):
        out = prog.run(backend=tiny_runtime, seed=seed)["name"]
        assert out and out in REPORT, out
        seen.add(out)
    assert len(seen) > 1            # sampled spans differ: the constraint is not one forced string


def test_span_grammar_takes_spans_only(tokenizer):
    from sglite.runtime.constrained import GrammarCompiler
    g = GrammarCompiler(tokenizer).compile_span(REPORT)

    def takes(text: str) -> bool:
        m = g.matcher()
        for t in tokenizer.encode(text):
            if not m.allowed_mask()[t] or not m.accept_token(t):
                return False
        return m.is_accepting()

    for good in ["Acme Widgets", '"record" revenue', "million;\nCEO", "鹭物流 净", "3.1 in Q4."]:
        assert takes(good), good
    for bad in ["Acme Gadgets", "record revenue", "Q4..", "", "净利润2.10亿美元"]:
        assert not takes(bad), bad


@pytest.mark.parametrize("kwargs,match", [
    ({"span_of": "  "}, "span_of.*non-empty text"),
    ({"span_of": REPORT, "regex": "[a-z]+"}, "only one of"),
    ({"span_of": 3}, "span_of.*must be a string"),
])
def test_bad_spans_are_refused_by_name(kwargs, match):
    with pytest.raises(RequestError, match=match):
        SamplingParams.from_dict(kwargs)


def test_a_source_past_the_limit_is_refused(tokenizer):
    from sglite.runtime.constrained import GrammarCompiler, GrammarError
    from sglite.runtime.constrained.automata.span_dfa import MAX_SPAN_CHARS
    with pytest.raises(GrammarError, match="span_of: the source text has .* more than the 48,000"):
        GrammarCompiler(tokenizer).compile_span("x" * (MAX_SPAN_CHARS + 1))
    with pytest.raises(GrammarError, match="span_of: the source text is empty"):
        GrammarCompiler(tokenizer).compile_span(" ")


def test_servers_that_would_ignore_the_span_refuse_it():
    from sglite.backend.openai import OpenAI
    for server in ("openai", "vllm", "sglang"):
        with pytest.raises(ValueError, match="span_of"):
            OpenAI("m", base_url="http://127.0.0.1:9/v1", server=server)._constraint("span_of", REPORT)
    sent = OpenAI("m", base_url="http://127.0.0.1:9/v1", server="sglite")._constraint("span_of", REPORT)
    assert sent == {"span_of": REPORT}
