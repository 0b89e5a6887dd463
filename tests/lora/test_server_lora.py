"""LoRA over HTTP: the OpenAI routes pick an adapter by model=NAME (and list them in /v1/models), the native
/generate by lora_path, and SGLang's /load_lora_adapter and /unload_lora_adapter change the set while it serves.
Also the language's lora_path (gen, select, the program default) through the in-process and HTTP backends."""
from __future__ import annotations

import httpx
import pytest

import sglite as sgl
from sglite.runtime.engine import Engine
from sglite.server import ModelInfo, ServerThread, create_app

GREEDY = {"max_new_tokens": 10, "temperature": 0.0, "ignore_eos": True}
PROMPT = "The annual report says that"


@pytest.fixture(scope="module")
def engine(base_folder, adapters):
    e = Engine(model=base_folder, lora_paths=[f"risk={adapters['all']}", f"service={adapters['other']}"],
               background=True, weights="fp32")
    yield e
    e.shutdown()


@pytest.fixture(scope="module")
def server(engine):
    with ServerThread(create_app(engine, ModelInfo.from_engine(engine, name="base"))) as s:
        yield s


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def expected(engine, lora):
    return engine.generate(PROMPT, GREEDY, lora_path=lora)["text"]


def test_models_lists_the_adapters(http):
    data = http.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["base", "risk", "service"]
    assert [m["parent"] for m in data] == [None, "base", "base"]
    assert http.get("/v1/models/risk").json()["parent"] == "base"
    assert http.get("/v1/models/nope").status_code == 404


def test_openai_completion_under_an_adapter(http, engine):
    for model, lora in (("risk", "risk"), ("service", "service"), ("base", None)):
        r = http.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 10,
                                               "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == expected(engine, lora)
    assert expected(engine, "risk") != expected(engine, None)
    r = http.post("/v1/completions", json={"model": "marketing", "prompt": PROMPT, "max_tokens": 4})
    assert r.status_code == 404 and "marketing" in r.json()["error"]["message"]


def test_native_generate_with_lora_path_per_prompt(http, engine):
    r = http.post("/generate", json={"text": [PROMPT, PROMPT, PROMPT], "sampling_params": GREEDY,
                                     "lora_path": ["risk", None, "service"]})
    assert r.status_code == 200, r.text
    assert [o["text"] for o in r.json()] == [expected(engine, x) for x in ("risk", None, "service")]
    r = http.post("/generate", json={"text": PROMPT, "sampling_params": GREEDY, "lora_path": "zzz"})
    assert r.status_code == 400 and "no LoRA adapter named 'zzz'" in r.json()["error"]["message"]


def test_load_and_unload_routes(http, adapters, tmp_path):
    r = http.post("/load_lora_adapter", json={"lora_name": "research", "lora_path": str(adapters["qv"])})
    assert r.status_code == 200 and r.json()["loaded_adapters"] == ["risk", "service", "research"]
    r = http.post("/generate", json={"text": PROMPT, "sampling_params": GREEDY, "lora_path": "research"})
    assert r.status_code == 200
    bad = http.post("/load_lora_adapter", json={"lora_name": "x", "lora_path": str(tmp_path / "missing")})
    assert bad.status_code == 400 and "does not exist" in bad.json()["error"]["message"]
    assert http.post("/unload_lora_adapter", json={"lora_name": "research"}).status_code == 200
    missing = http.post("/unload_lora_adapter", json={"lora_name": "research"})
    assert missing.status_code == 404
    assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["base", "risk", "service"]


def test_unload_of_an_adapter_in_use_is_409(http, engine):
    stream = engine.generate(PROMPT, {**GREEDY, "max_new_tokens": 40}, lora_path="service", stream=True)
    next(stream)
    r = http.post("/unload_lora_adapter", json={"lora_name": "service"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "lora_adapter_in_use"
    list(stream)


@sgl.function
def report(s, lora=None):
    s += PROMPT + sgl.gen("a", max_tokens=10, temperature=0, ignore_eos=True, lora_path=lora)
    s += " Verdict:" + sgl.select("v", choices=[" good", " bad", " unclear"], lora_path=lora)


@sgl.function(lora_path="risk")
def risk_report(s):
    s += PROMPT + sgl.gen("a", max_tokens=10, temperature=0, ignore_eos=True)
    s += " Verdict:" + sgl.select("v", choices=[" good", " bad", " unclear"])


BACKENDS = {"runtime": lambda engine, server: sgl.Runtime(engine=engine),
            "endpoint": lambda engine, server: sgl.RuntimeEndpoint(server.url),
            "openai": lambda engine, server: sgl.OpenAI("base", base_url=server.url + "/v1", api_key="unused",
                                                        is_chat_model=False)}


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_language_lora_path(kind, engine, server):
    backend = BACKENDS[kind](engine, server)
    under = report.run(lora="risk", backend=backend)
    assert under["a"] == expected(engine, "risk")
    assert report.run(backend=backend)["a"] == expected(engine, None)
    default = risk_report.run(backend=backend)
    assert default["a"] == under["a"] and default["v"] == under["v"]
    assert risk_report.run(lora_path="service", backend=backend)["a"] == expected(engine, "service")
    states = risk_report.run_batch([{}, {}], backend=backend)
    assert [st["a"] for st in states] == [under["a"]] * 2
    with pytest.raises(Exception, match="zzz"):
        _raise_state(report.run(lora="zzz", backend=backend))


def _raise_state(state):
    if state.error() is not None:
        raise state.error()
    raise AssertionError("an unknown adapter name ran")
