"""RuntimeEndpoint and OpenAI backends against sglite's own server app (tiny model, in-process HTTP)."""
from __future__ import annotations

import pytest

import sglite as sgl


@pytest.fixture(scope="module")
def client(tiny_model):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from sglite.runtime.engine.engine import Engine
    from sglite.server.app import create_app

    engine = Engine(tiny_model, max_total_tokens=16384, max_running_requests=16)
    with TestClient(create_app(engine)) as c:
        yield c
    engine.shutdown()


@sgl.function
def qa(s, q):
    s += sgl.system("Be brief.")
    s += sgl.user(q)
    s += sgl.assistant(sgl.gen("a", max_tokens=5, temperature=0))
    s += "Verdict:" + sgl.select("v", [" yes", " no", " maybe"])


def test_runtime_endpoint_runs_programs(client, tiny_model):
    ep = sgl.RuntimeEndpoint("http://testserver", client=client, tokenizer=tiny_model.tokenizer)
    s = qa.run(q="Tea?", backend=ep)
    assert s.error() is None and s["v"] in (" yes", " no", " maybe")
    assert s.text().startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTea?")
    rt = sgl.Runtime(engine=client.app.state.engine)
    ref = qa.run(q="Tea?", backend=rt)
    assert ref.text() == s.text()
    streamed = qa.run(q="Tea?", backend=ep, stream=True)
    assert "".join(streamed.text_iter("a")) == s["a"]
    states = qa.run_batch([{"q": "A?"}, {"q": "B?"}], backend=ep)
    assert all(st.error() is None for st in states)


def test_openai_backend_chat_and_completion(client, tiny_model):
    chat = sgl.OpenAI("default", base_url="http://testserver/v1", client=client)
    st = qa.run(q="Tea?", backend=chat)
    # select on a chat model cannot work (no prompt logprobs) and says so
    assert st["a"] is not None and "prompt log-probabilities" in str(st.error())

    @sgl.function
    def completion_prog(s):
        s += "The weather today is"
        s += sgl.select("w", [" sunny", " rainy"])
        s += " and" + sgl.gen("more", max_tokens=4, temperature=0)

    comp = sgl.OpenAI("default", base_url="http://testserver/v1", client=client, is_chat_model=False)
    cs = completion_prog.run(backend=comp)
    assert cs.error() is None and cs["w"] in (" sunny", " rainy")
    rt = sgl.Runtime(engine=client.app.state.engine)
    assert completion_prog.run(backend=rt)["w"] == cs["w"]


def test_endpoint_errors_name_the_problem_and_openai_streams(client, tiny_model):
    ep = sgl.RuntimeEndpoint("http://testserver", client=client, tokenizer=tiny_model.tokenizer)

    @sgl.function
    def bad_top_p(s):
        s += "Hi" + sgl.gen("x", max_tokens=4, top_p=5.0)

    @sgl.function
    def bad_regex(s):
        s += "Hi" + sgl.gen("x", max_tokens=4, regex="([0-9]")

    with pytest.raises(sgl.RequestError) as e:   # refused by the language's merge, before any request
        bad_top_p.run(backend=ep)
    assert e.value.param == "top_p"
    st = bad_regex.run(backend=ep)               # only the server's grammar compiler can judge this one
    assert "regex" in str(st.error()) and "HTTP 400" in str(st.error())
    err = st.error()
    err = err if isinstance(err, sgl.RequestError) else err.__cause__   # the server's 400, as a RequestError
    assert isinstance(err, sgl.RequestError) and err.param == "regex" and err.code == "invalid_grammar"

    @sgl.function
    def story(s):
        s += "Once upon a time"
        s += sgl.gen("more", max_tokens=6, temperature=0)

    comp = sgl.OpenAI("default", base_url="http://testserver/v1", client=client, is_chat_model=False)
    streamed = story.run(backend=comp, stream=True)
    pieces = list(streamed.text_iter("more"))
    assert "".join(pieces) == streamed["more"] and streamed.get_meta_info("more")["completion_tokens"] == 6
