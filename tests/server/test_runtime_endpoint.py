"""The language's RuntimeEndpoint backend speaks /generate: generation, streaming, prefix commit and select."""
from __future__ import annotations

import pytest


@pytest.fixture()
def endpoint(server, engine_and_info):
    RuntimeEndpoint = pytest.importorskip("sglite.backend.runtime_endpoint").RuntimeEndpoint
    ep = RuntimeEndpoint(server.url, tokenizer=engine_and_info[1].tokenizer)
    yield ep
    ep.shutdown()


def test_generate_and_stream(endpoint):
    from sglite.backend.base import Prompt
    from sglite.lang.sampling import GenParams
    from sglite.protocol import SamplingParams

    prompt, params = Prompt("The capital of France is"), GenParams(SamplingParams(max_new_tokens=6, temperature=0))
    out = endpoint.generate(prompt, params)
    chunks = list(endpoint.generate_stream(prompt, params))
    assert len(chunks) > 1 and "".join(c.text for c in chunks) == out.text
    assert chunks[-1].meta_info["finish_reason"] == out.meta_info["finish_reason"]
    assert out.meta_info["completion_tokens"] == 6


def test_batched_body_carries_each_request_and_a_logprob_start_of_zero(endpoint):
    from sglite.protocol import GenerateRequest, SamplingParams

    reqs = [GenerateRequest(params=SamplingParams(max_new_tokens=0), input_ids=ids, return_logprob=True,
                            logprob_start_len=0) for ids in ([5, 6, 7], [5, 6, 8, 9])]
    body = endpoint._body(reqs)
    assert body["input_ids"] == [[5, 6, 7], [5, 6, 8, 9]] and body["logprob_start_len"] == 0
    outs = endpoint._complete(reqs)
    assert [len(o.meta_info["input_token_logprobs"]) for o in outs] == [3, 4]


def test_commit_prefix_and_select(endpoint, real_engine):
    from sglite.backend.base import Prompt
    from sglite.lang.choices import token_length_normalized

    prompt = Prompt("Q: Is the sky blue?\nA:")
    endpoint.commit_prefix(prompt)
    decision = endpoint.select(prompt, [" yes", " no", " maybe"], 0.0, token_length_normalized)
    assert decision is not None
    assert endpoint.get_model_info()["tokenizer_path"] == "default"


def test_a_program_gets_constrained_logprobs_through_the_server(endpoint):
    import sglite as sgl

    @sgl.function
    def pick(s):
        s += "Colour: " + sgl.gen("c", max_tokens=8, regex="(red|green|blue)", return_constrained_logprob=True)

    state = pick.run(backend=endpoint)
    entries = state.get_meta_info("c")["output_token_constrained_logprobs"]
    assert "".join(e[2] for e in entries).startswith(state["c"]) and state["c"] in ("red", "green", "blue")
