"""select: one batched scoring request over the cached prefix, correct token boundaries, the three methods."""
from __future__ import annotations

import sglite as sgl
from sglite.backend.runtime import Runtime
from sglite.lang.choices import ChoicesDecision, greedy_token_selection, token_length_normalized

from .fake_engine import FakeEngine


def _prog():
    @sgl.function
    def classify(s, text):
        s += f"Text: {text}\nSentiment:"
        s += sgl.select("label", [" positive", " negative", " neutral"])
    return classify


def test_select_scores_all_choices_in_one_batch_over_cached_prefix():
    eng = FakeEngine(liked={"negative"}, latency=0.05)
    be = Runtime(engine=eng)
    s = _prog().run(text="awful", backend=be)
    assert s["label"] == " negative"
    prefix_len = len(eng.tokenizer.encode("Text: awful\nSentiment:"))
    scored = [c for c in eng.calls if c.get("logprob_start_len") is not None]
    assert len(scored) == 3 and {c["logprob_start_len"] for c in scored} == {prefix_len}
    assert max(c["start"] for c in scored) < min(c["end"] for c in scored)   # one batch: all queued together
    meta = s.get_meta_info("label")
    assert meta["normalized_prompt_logprobs"] == [-5.0, 0.0, -5.0]
    assert [len(t) for t in meta["input_token_logprobs"]] == [1, 1, 1]
    assert eng.prefill_calls()[0]["prompt"] == "Text: awful\nSentiment:"


def test_select_handles_tokens_merging_at_the_boundary():
    # the prompt ends inside a word: "bl" + "ue" tokenizes as one token " blue", so the choice's own tokens
    # start one position earlier than the prompt's length
    eng = FakeEngine(liked={"blue"})
    be = Runtime(engine=eng)

    @sgl.function
    def prog(s):
        s += "The sky is bl"
        s += sgl.select("c", ["ack", "ue", "ue sky today"])

    s = prog.run(backend=be)
    meta = s.get_meta_info("c")
    toks = [[t[2] for t in choice] for choice in meta["input_token_logprobs"]]
    assert toks == [[" black"], [" blue"], [" blue", " sky", " today"]]
    assert s["c"] == "ue" and s.text() == "The sky is blue"


def test_greedy_and_unconditional_methods():
    eng = FakeEngine(score=lambda ctx, tok: {" cat": -1.0, " dog": -1.0, " sat": -0.5, " ran": -3.0}.get(tok, -2.0))
    be = Runtime(engine=eng)

    @sgl.function
    def prog(s, method):
        s += "The"
        s += sgl.select("c", [" cat ran", " dog sat"], choices_method=method)

    assert prog.run(method=greedy_token_selection, backend=be)["c"] == " dog sat"
    s = prog.run(method=sgl.unconditional_likelihood_normalized, backend=be)
    meta = s.get_meta_info("c")
    assert len(meta["unconditional_token_logprobs"][0]) == 2 and s["c"] in (" cat ran", " dog sat")


def test_method_contracts():
    d = token_length_normalized(choices=["a", "b"], normalized_prompt_logprobs=[-1.0, -0.5],
                                input_token_logprobs=[[(-1.0, 1, "a")], [(-0.5, 2, "b")]],
                                output_token_logprobs=[[], []])
    assert isinstance(d, ChoicesDecision) and d.decision == "b"
    d = greedy_token_selection(choices=["a", "ab"], normalized_prompt_logprobs=[-1.0, -1.0],
                               input_token_logprobs=[[(-1.0, 1, "a")], [(-1.0, 1, "a"), (-0.1, 2, "b")]],
                               output_token_logprobs=[[], []])
    assert d.decision == "ab"


def test_gen_with_choices_is_a_select():
    g = sgl.gen("x", choices=["a", "b"])
    assert type(g).__name__ == "Select" and g.method is token_length_normalized
