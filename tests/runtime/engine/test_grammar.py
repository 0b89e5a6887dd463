"""Grammar integration: constrained outputs are valid by construction, compile errors reach the caller, and
jump-forward appends forced tokens as one extend step."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("sglite.runtime.constrained")

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 6},
                         "age": {"type": "integer", "minimum": 0, "maximum": 99}}}


@pytest.mark.parametrize("jump_forward", [True, False])
def test_regex_outputs_fullmatch(make_engine, jump_forward):
    e = make_engine(enable_jump_forward=jump_forward)
    pattern = r"\d{3}-[a-z]{2,5}"
    outs = e.generate(["Code:", "Phone number:", "x"], {"temperature": 1.0, "seed": 7, "max_new_tokens": 30,
                                                        "regex": pattern})
    for o in outs:
        assert re.fullmatch(pattern, o["text"]), o["text"]
        assert o["meta_info"]["finish_reason"] == {"type": "stop", "matched": None}


def test_json_schema_outputs_validate(make_engine):
    e = make_engine()
    outs = e.generate(["JSON:"] * 4, {"temperature": 1.0, "max_new_tokens": 60, "json_schema": SCHEMA})
    for o in outs:
        if o["meta_info"]["finish_reason"]["type"] == "stop":
            doc = json.loads(o["text"])
            assert set(doc) == {"name", "age"} and 0 <= doc["age"] <= 99 and len(doc["name"]) <= 6
    assert any(o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs)


def test_truncated_constrained_output_reports_length(make_engine):
    e = make_engine()
    out = e.generate("x", {"temperature": 0, "max_new_tokens": 3, "regex": r"[a-z]{20}"})
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_eos_only_when_accepting(make_engine):
    e = make_engine()
    # "[a-z]*" accepts at once; the first token may be EOS, but text stays in the language either way
    outs = e.generate(["a", "b", "c"], {"temperature": 1.0, "seed": 3, "max_new_tokens": 10, "regex": r"[a-z]*"})
    for o in outs:
        assert re.fullmatch(r"[a-z]*", o["text"])


def test_compile_errors_raise_before_queueing(make_engine):
    e = make_engine()
    with pytest.raises(ValueError):
        e.generate("x", {"regex": "(unclosed"})
    with pytest.raises(ValueError):
        e.generate("x", {"json_schema": "{not json"})
    assert not e.core.scheduler.has_work()
    assert e.generate("x", {"temperature": 0, "max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2


def test_mixed_constrained_and_free_batch(make_engine):
    e = make_engine()
    free = {"temperature": 0, "max_new_tokens": 8}
    alone = e.generate("Hello", free)["output_ids"]
    e.flush_cache()
    outs = e.generate(["Hello", "Code:"], [free, {"temperature": 0, "max_new_tokens": 20, "regex": r"[0-9]{4}"}])
    assert outs[0]["output_ids"] == alone
    assert re.fullmatch(r"[0-9]{4}", outs[1]["text"])


def test_jump_forward_appends_forced_tokens_in_one_step(make_engine, monkeypatch):
    """With a jump_forward_tokens that returns the plain tokenization of forced text, a grammar with long
    forced stretches needs far fewer forward passes, and the output is the same language."""
    import sglite.runtime.constrained as constrained

    def naive(tokenizer, matcher, min_backoff=0):
        return tokenizer.encode(matcher.find_jump_forward_string())
    monkeypatch.setattr(constrained, "jump_forward_tokens", naive)
    pattern = r"The answer is (yes|no)\. Thank you for asking!"
    params = {"temperature": 1.0, "seed": 1, "max_new_tokens": 40, "regex": pattern}
    on, off = make_engine(enable_jump_forward=True), make_engine(enable_jump_forward=False)
    a, b = on.generate("Q:", params), off.generate("Q:", params)
    assert re.fullmatch(pattern, a["text"]) and re.fullmatch(pattern, b["text"])
    assert on.get_stats()["forward_passes"] <= off.get_stats()["forward_passes"] // 2
    assert a["meta_info"]["finish_reason"]["type"] == "stop"
    # forced_tokens counts what jump-forward appended; every other output token was sampled in its own pass
    forced = a["meta_info"]["forced_tokens"]
    assert b["meta_info"]["forced_tokens"] == 0 and forced > a["meta_info"]["completion_tokens"] // 2
    assert on.get_stats()["forward_passes"] == a["meta_info"]["completion_tokens"] - forced   # one per sample


def test_masks_are_built_on_the_worker_during_the_forward_pass(make_engine, monkeypatch):
    """Every step's grammar masks come from the prefetch worker (built while the model runs), once per sampled
    token, and the sampler does not build them again."""
    import threading

    from sglite.runtime.engine.grammar_masks import GrammarMasks

    threads = []
    build = GrammarMasks.build

    def spy(reqs, vocab_size):
        threads.append(threading.current_thread().name)
        return build(reqs, vocab_size)
    monkeypatch.setattr(GrammarMasks, "build", staticmethod(spy))
    e = make_engine(enable_jump_forward=False, grammar_mask_overlap="on")
    outs = e.generate(["Q:", "A longer prompt:"], {"max_new_tokens": 12, "regex": r"[0-9]{6}", "temperature": 0})
    assert all(re.fullmatch(r"[0-9]{6}", o["text"]) for o in outs)
    assert len(threads) == 6 and all(t.startswith("sglite-masks") for t in threads)
    threads.clear()
    e = make_engine(enable_jump_forward=False, grammar_mask_overlap="off")
    assert [o["text"] for o in e.generate(["Q:", "A longer prompt:"], {"max_new_tokens": 12, "regex": r"[0-9]{6}",
                                                                      "temperature": 0})] == [o["text"] for o in outs]
    assert len(threads) == 6 and not any(t.startswith("sglite-masks") for t in threads)


def test_concurrent_first_callers_build_one_compiler_and_one_grammar(monkeypatch, tokenizer):
    """run_batch's program threads all submit at once: they must share one token index and one compile of
    the schema (each thread building its own took seconds of CPU apiece and starved the engine)."""
    import threading

    from sglite.runtime import constrained
    from sglite.runtime.engine.grammar_backend import GrammarBackend
    from sglite.runtime.engine.sampling_params import SamplingParams

    built = {"compilers": 0}
    real_init = constrained.GrammarCompiler.__init__

    def counting_init(self, *a, **kw):
        built["compilers"] += 1
        real_init(self, *a, **kw)

    monkeypatch.setattr(constrained.GrammarCompiler, "__init__", counting_init)
    backend = GrammarBackend(tokenizer)
    params = SamplingParams.from_dict({"json_schema": SCHEMA})
    start = threading.Barrier(8)
    results = []

    def submit():
        start.wait()
        results.append(backend.compile(params))

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built["compilers"] == 1
    assert len({id(g) for g in results}) == 1 and len(results) == 8


def test_an_engine_with_threads_builds_its_grammar_compiler_before_any_constrained_request(make_engine):
    """The token index takes about a second on a real vocabulary: an engine that runs its own loop thread builds
    it beside the loop from the start, so the first constrained request does not wait for all of it; an engine
    without threads (background=False) starts none."""
    import time

    e = make_engine()
    deadline = time.monotonic() + 60
    while e.grammar._compiler is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert e.grammar._compiler is not None
    quiet = make_engine(background=False)
    time.sleep(0.2)
    assert quiet.grammar._compiler is None
    assert quiet.generate("Q:", {"max_new_tokens": 4, "regex": "[0-9]{4}", "temperature": 0})["text"].isdigit()
