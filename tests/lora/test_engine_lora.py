"""Multi-LoRA in the engine: requests under different adapters share batches and still get what each adapter
alone gives; the prefix cache never crosses adapters; adapters load and unload while others run; bad names fail
before any work."""
from __future__ import annotations

import threading

import pytest

from sglite.protocol import RequestError
from sglite.runtime.engine import Engine
from sglite.runtime.lora import LoraError, LoraInUseError

GREEDY = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}
PROMPTS = ["The quarterly revenue of the company", "Risk factors include", "Customer service replied that",
           "The research team found"]


@pytest.fixture(scope="module")
def engine(base_folder, adapters):
    e = Engine(model=base_folder, lora_paths={"a": adapters["all"], "b": adapters["other"]},
               max_loras_per_batch=2, weights="fp32")
    yield e
    e.shutdown()


def texts(outs):
    return [o["text"] for o in outs]


def test_mixed_batch_equals_each_request_alone(engine):
    loras = ["a", None, "b", "a"]
    together = texts(engine.generate(PROMPTS, GREEDY, lora_path=loras))
    alone = [engine.generate(p, GREEDY, lora_path=lp)["text"] for p, lp in zip(PROMPTS, loras)]
    assert together == alone
    base = texts(engine.generate(PROMPTS, GREEDY))
    assert together[0] != base[0] and together[2] != base[2]   # the adapters change the outputs
    assert together[1] == base[1]


def test_more_adapters_than_a_batch_holds_still_run(engine, adapters):
    engine.load_lora_adapter("c", adapters["qv"])
    try:
        loras = ["a", "b", "c", None]          # max_loras_per_batch=2: one of them waits a step
        together = texts(engine.generate(PROMPTS, GREEDY, lora_path=loras))
        alone = [engine.generate(p, GREEDY, lora_path=lp)["text"] for p, lp in zip(PROMPTS, loras)]
        assert together == alone
    finally:
        engine.unload_lora_adapter("c")


def test_prefix_cache_is_kept_apart_per_adapter(engine):
    engine.flush_cache()
    prompt = "A long shared preamble about the annual report and its many sections. " * 4
    first = engine.generate(prompt, GREEDY, lora_path="a")
    assert first["meta_info"]["cached_tokens"] == 0
    for other in ("b", None):
        assert engine.generate(prompt, GREEDY, lora_path=other)["meta_info"]["cached_tokens"] == 0
    again = engine.generate(prompt, GREEDY, lora_path="a")
    assert again["meta_info"]["cached_tokens"] > 0
    assert again["text"] == first["text"]


def test_unknown_adapter_fails_before_any_work(engine):
    before = engine.get_stats()["prompt_tokens"]
    with pytest.raises(RequestError, match=r"no LoRA adapter named 'zzz'.*loaded: \['a', 'b'\]"):
        engine.generate(PROMPTS[:2], GREEDY, lora_path=["a", "zzz"])
    assert engine.get_stats()["prompt_tokens"] == before
    assert all(engine.core.lora.get(n).holders == 0 for n in ("a", "b"))
    with pytest.raises(RequestError, match="lora_path is a list of 1"):
        engine.generate(PROMPTS[:2], GREEDY, lora_path=["a"])


def test_bad_request_releases_its_adapter(engine):
    with pytest.raises(RequestError):
        engine.generate(PROMPTS[0], {**GREEDY, "temperature": -1.0}, lora_path="a")
    assert engine.core.lora.get("a").holders == 0


def test_adapter_in_use_is_not_unloaded_and_others_load_meanwhile(engine, adapters):
    stream = engine.generate(PROMPTS[0], {**GREEDY, "max_new_tokens": 40}, lora_path="b", stream=True)
    first = next(stream)                    # the request is running and holds "b"
    assert first is not None
    with pytest.raises(LoraInUseError, match="in use"):
        engine.unload_lora_adapter("b")
    engine.load_lora_adapter("late", adapters["qv"])
    assert engine.generate(PROMPTS[1], GREEDY, lora_path="late")["text"]
    rest = list(stream)
    assert rest
    engine.unload_lora_adapter("late")
    assert engine.lora_adapters() == ["a", "b"]


def test_load_errors_leave_the_engine_as_it_was(engine, tmp_path):
    with pytest.raises(LoraError, match="does not exist"):
        engine.load_lora_adapter("x", tmp_path / "missing")
    with pytest.raises(LoraError, match="already loaded"):
        engine.load_lora_adapter("a", tmp_path / "missing")
    with pytest.raises(LoraError, match="no LoRA adapter named"):
        engine.unload_lora_adapter("x")
    assert engine.lora_adapters() == ["a", "b"]


def test_concurrent_requests_under_adapters_while_loading(engine, adapters):
    """Requests under "a" keep running while another adapter loads and unloads on another thread."""
    expect = engine.generate(PROMPTS[0], GREEDY, lora_path="a")["text"]
    errors: list[BaseException] = []

    def churn():
        try:
            for i in range(3):
                engine.load_lora_adapter(f"t{i}", adapters["qv"])
                engine.unload_lora_adapter(f"t{i}")
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)
    t = threading.Thread(target=churn)
    t.start()
    outs = [engine.generate(PROMPTS[0], GREEDY, lora_path="a")["text"] for _ in range(3)]
    t.join()
    assert not errors
    assert outs == [expect] * 3


def test_bad_lora_paths_fail_before_the_model_loads(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        Engine(model=tmp_path / "no-model-here", lora_paths=[f"x={tmp_path / 'missing'}"])
    with pytest.raises(ValueError, match="names adapter 'x' twice"):
        Engine(model=tmp_path / "no-model-here", lora_paths=[("x", tmp_path), ("x", tmp_path)])


def test_bf16_weights_mixed_batch_equals_alone(base_folder, adapters):
    e = Engine(model=base_folder, lora_paths={"a": adapters["all"], "b": adapters["other"]}, weights="bf16")
    try:
        loras = ["b", "a", None, "a"]
        together = texts(e.generate(PROMPTS, GREEDY, lora_path=loras))
        alone = [e.generate(p, GREEDY, lora_path=lp)["text"] for p, lp in zip(PROMPTS, loras)]
        assert together == alone
    finally:
        e.shutdown()
