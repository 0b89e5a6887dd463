"""The in-process Runtime backend on the tiny random-weight model: programs run end to end through the real
engine, select's scores match a from-scratch computation, fork and run_batch hit the prefix cache."""
from __future__ import annotations

import math

import pytest

import sglite as sgl


@pytest.fixture(scope="module")
def rt(tiny_model):
    runtime = sgl.Runtime(tiny_model, max_total_tokens=16384, max_running_requests=16)
    yield runtime
    runtime.shutdown()


@sgl.function
def chat_program(s, question):
    s += sgl.system("Answer briefly.")
    with s.user():
        s += question
    s += sgl.assistant(sgl.gen("answer", max_tokens=6))
    s += "Verdict:" + sgl.select("verdict", [" yes", " no", " it depends on the weather"])


def test_program_runs_through_engine_with_model_chat_template(rt, tokenizer):
    s = chat_program.run(question="Is tea hot?", backend=rt, temperature=0)
    assert s.error() is None
    msgs = s.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    head = tokenizer.apply_chat_template(msgs[:2], add_generation_prompt=True)
    assert s.text().startswith(head + s["answer"])
    assert s["verdict"] in (" yes", " no", " it depends on the weather")
    assert s.get_meta_info("answer")["completion_tokens"] <= 6


def test_select_scores_match_full_recomputation(rt):
    prefix = "The weather today is sun"
    choices = ["ny", "ny and warm", " rain"]

    @sgl.function
    def prog(s):
        s += prefix
        s += sgl.select("w", choices)

    s = prog.run(backend=rt)
    meta = s.get_meta_info("w")
    tok = rt.tokenizer
    pre = tok.encode(prefix)
    for choice, own, score in zip(choices, meta["input_token_logprobs"], meta["normalized_prompt_logprobs"]):
        full = tok.encode(prefix + choice)
        k = 0
        while k < min(len(pre), len(full)) and pre[k] == full[k]:
            k += 1
        ref = rt.engine.generate(input_ids=full, sampling_params={"max_new_tokens": 0}, return_logprob=True,
                                 logprob_start_len=0)["meta_info"]["input_token_logprobs"][k:]
        assert [t[1] for t in own] == full[k:]
        for (lp, _, _), (rlp, _, _) in zip(own, ref):
            assert math.isclose(lp, rlp, abs_tol=1e-3)
        assert math.isclose(score, sum(t[0] for t in ref) / len(ref), abs_tol=1e-3)


def test_fork_and_batch_hit_the_prefix_cache(rt):
    @sgl.function
    def tot(s, topic):
        s += "You are a careful analyst. Consider the topic from several angles before answering.\n"
        s += f"Topic: {topic}\n"
        forks = s.fork(3)
        forks += lambda i: f"Angle {i + 1}:"
        forks += sgl.gen("angle", max_tokens=4)
        forks.join()

    rt.usage.reset()
    states = tot.run_batch([{"topic": t} for t in ("tea", "coffee", "water", "milk")], backend=rt,
                           temperature=0)
    assert all(st.error() is None and len(st["angle"]) == 3 for st in states)
    assert rt.usage.cache_hit_rate > 0.5


def test_streaming_through_engine(rt):
    @sgl.function
    def prog(s):
        s += "Once upon a time"
        s += sgl.gen("story", max_tokens=8, temperature=0)

    s = prog.run(backend=rt, stream=True)
    pieces = list(s.text_iter("story"))
    assert "".join(pieces) == s["story"]
    assert s.get_meta_info("story")["completion_tokens"] == 8 or s.get_meta_info("story")["finish_reason"]
