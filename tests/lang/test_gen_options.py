"""Generation options in programs: a gen's options are merged over the run's by protocol's SamplingParams, so a
bad value is refused (RequestError naming it) before any backend call; the backends send the merged params."""
from __future__ import annotations

import pytest

import sglite as sgl
from sglite.backend.base import Backend, Completion, Prompt
from sglite.lang.sampling import GenOptions, GenParams

from .fake_engine import FakeEngine


class RecordingBackend(Backend):
    """Any backend: records what it is asked."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def generate(self, prompt, params):
        self.calls.append(params)
        return Completion("ok")

    def select(self, prompt, choices, temperature, method):
        raise NotImplementedError


@sgl.function
def bad_temperature(s):
    s += "Hi " + sgl.gen("x", temperature=-1)


@pytest.mark.parametrize("kind", ["fake", "in_process"])
def test_bad_gen_value_raises_request_error_before_any_backend_call(kind, request):
    backend = RecordingBackend() if kind == "fake" else request.getfixturevalue("tiny_runtime")
    with pytest.raises(sgl.RequestError) as e:
        bad_temperature.run(backend=backend)
    assert e.value.param == "temperature" and e.value.code == "invalid_value"
    if kind == "fake":
        assert backend.calls == []


def test_bad_run_default_and_bad_merge_are_refused():
    be = RecordingBackend()

    @sgl.function
    def prog(s):
        s += "Hi " + sgl.gen("x", min_tokens=20)

    with pytest.raises(sgl.RequestError) as e:
        prog.run(backend=be, top_p=0)
    assert e.value.param == "top_p"
    with pytest.raises(sgl.RequestError) as e:   # each value is fine alone; merged, min > max
        prog.run(backend=be, max_new_tokens=10)
    assert e.value.param == "min_new_tokens"
    assert prog.run(backend=be, max_new_tokens=30).error() is None and be.calls
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        prog.run_batch([{}], backend=be, temprature=0)


def test_batch_records_the_request_error_per_program():
    @sgl.function
    def prog(s, t):
        s += "Hi " + sgl.gen("x", temperature=t)

    states = prog.run_batch([{"t": 0.5}, {"t": -1.0}], backend=RecordingBackend())
    assert states[0].error() is None
    assert isinstance(states[1].error(), sgl.RequestError) and states[1].error().param == "temperature"


def test_invalid_regex_is_refused_by_the_in_process_engine(tiny_runtime):
    @sgl.function
    def prog(s):
        s += "Digits: " + sgl.gen("d", regex="([0-9]", max_tokens=4)

    s = prog.run(backend=tiny_runtime)
    assert isinstance(s.error(), sgl.RequestError) and s.error().param == "regex"
    with pytest.raises(sgl.ProgramError) as e:
        s["d"]
    assert e.value.__cause__.param == "regex"


def test_merged_params_reach_the_backends():
    opts = GenOptions.from_kwargs(max_tokens=5, stop="\n", return_logprob=True, json_schema={"type": "integer"})
    run = GenOptions.from_kwargs(temperature=0, top_logprobs_num=2).over(GenParams())
    p = opts.over(run)
    assert p.sampling == sgl.SamplingParams(max_new_tokens=5, stop=("\n",), temperature=0.0,
                                            json_schema='{"type": "integer"}')
    r = p.request("Hi")
    assert (r.params, r.text, r.return_logprob, r.top_logprobs_num, r.logprob_start_len) == (p.sampling, "Hi", True, 2, None)
    assert repr(opts) == ("GenOptions(max_new_tokens=5, stop='\\n', json_schema='{\"type\": \"integer\"}', "
                          "return_logprob=True)")

    from sglite.backend.openai import OpenAI
    oa = OpenAI("m", base_url="http://unused", server="openai")   # OpenAI's own field: response_format
    assert oa._params(GenParams()) == {"max_tokens": 128}   # always sent: OpenAI servers default otherwise
    body = oa._params(p)
    assert body["max_tokens"] == 5 and body["temperature"] == 0.0 and body["stop"] == ["\n"]
    assert body["response_format"]["json_schema"]["schema"] == {"type": "integer"}
    oa.shutdown()

    eng = FakeEngine()
    sgl.Runtime(engine=eng).generate(Prompt("x"), p)
    assert eng.calls[-1]["sampling_params"] == {"max_new_tokens": 5, "temperature": 0.0, "stop": ["\n"],
                                                "json_schema": '{"type": "integer"}'}
