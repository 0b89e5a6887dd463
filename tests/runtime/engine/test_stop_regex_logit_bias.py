"""stop_regex (StopChecker: generation ends at the token that completes a match, text kept whole) and logit_bias
(Sampler: added to the logits after penalties, before masks)."""
from __future__ import annotations

import pytest
import torch

from sglite.protocol import SamplingParams
from sglite.runtime.engine.request import Req
from sglite.runtime.engine.sampler import Sampler
from sglite.runtime.engine.stop import StopChecker


def push_all(checker, tok, text):
    ids = tok.encode(text)
    for i, t in enumerate(ids):
        matched = checker.push([t])
        if matched:
            return matched, i, ids
    return None, len(ids), ids


def test_stop_regex_stops_at_the_completing_token(tokenizer):
    c = StopChecker(tokenizer, stop_regex=[r"\d+\.\d"])
    matched, at, ids = push_all(c, tokenizer, "The value is 3.14 and more text")
    assert matched == r"\d+\.\d"
    assert c.stopped and c.text == tokenizer.decode(ids[:at + 1])   # no trim: the completing token is kept
    assert "3.1" in c.text and "more" not in c.text
    assert c.stream_delta(final=True) == c.text


def test_stop_regex_anchors_and_no_match(tokenizer):
    c = StopChecker(tokenizer, stop_regex=["^Answer:", "zzz$"])
    matched, _, _ = push_all(c, tokenizer, "Question: Answer: yes")
    assert matched is None and not c.stopped   # ^ anchors at the start of the output only
    c = StopChecker(tokenizer, stop=["yes"], stop_regex=["Ans"])
    matched, _, _ = push_all(c, tokenizer, "Answer: yes")
    assert matched == "Ans"


def test_stop_string_checked_before_regex(tokenizer):
    c = StopChecker(tokenizer, stop=["b"], stop_regex=["b"])
    matched, _, _ = push_all(c, tokenizer, "a b c")
    assert matched == "b" and c.text == "a "   # the stop string wins and is trimmed


def test_stop_regex_in_params_is_checked():
    from sglite.protocol import RequestError
    assert SamplingParams.from_dict({"stop_regex": "a+"}).stop_regex == ("a+",)
    with pytest.raises(RequestError) as info:
        SamplingParams.from_dict({"stop_regex": ["(unclosed"]})
    assert info.value.param == "stop_regex"


def test_logit_bias_math():
    s = Sampler(vocab_size=5, eos_token_id=None)
    p = SamplingParams.from_dict({"temperature": 0, "logit_bias": {"1": 5, "3": -100}})
    r = Req("r", [0], p)
    logits = torch.tensor([[1.0, 0.0, 2.0, 3.0, 0.5]])
    s._apply_logit_bias(logits, [r, ])
    assert logits[0].tolist() == pytest.approx([1.0, 5.0, 2.0, -97.0, 0.5])


def test_logit_bias_steers_greedy_and_sampled_rows():
    s = Sampler(vocab_size=6, eos_token_id=None)
    logits = torch.zeros(3, 6)
    logits[:, 2] = 4.0
    reqs = [Req("a", [0], SamplingParams.from_dict({"temperature": 0, "logit_bias": {4: 100}})),
            Req("b", [0], SamplingParams.from_dict({"temperature": 1.0, "logit_bias": {5: 100}}),
                generator=torch.Generator().manual_seed(0)),
            Req("c", [0], SamplingParams.from_dict({"temperature": 0}))]
    assert s.sample(logits, reqs).token_ids == [4, 5, 2]
