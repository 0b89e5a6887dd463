"""The SGLang frontend surface SGLang's own test programs use: global_config, the REGEX_* constants, typed gens
that stop where SGLang's do, text_async_iter(return_meta_data=True), num_api_spec_tokens, token_usage.
Scripted FakeEngine and the tiny random-weight model; nothing downloaded."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import sglite as sgl
from sglite.backend.runtime import Runtime
from sglite.lang.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR

from .fake_engine import FakeEngine


# --- global_config ------------------------------------------------------------------------------------------
def test_global_config_default_backend_is_the_default_backend():
    before = sgl.get_default_backend(create=False)
    be = Runtime(engine=FakeEngine())
    try:
        sgl.global_config.default_backend = be
        assert sgl.get_default_backend(create=False) is be and sgl.global_config.default_backend is be
        sgl.set_default_backend(None)
        assert sgl.global_config.default_backend is None   # reading it starts no Runtime
    finally:
        sgl.set_default_backend(before)


def test_global_config_refuses_unknown_settings_and_honours_its_own(capsys):
    cfg = sgl.global_config
    with pytest.raises(AttributeError, match="verbosity"):
        cfg.verbostiy = 2
    with pytest.raises(ValueError, match="no such option"):
        cfg.spaces_between_special_tokens_in_out = False
    eng = FakeEngine(respond=lambda p, sp: "hi")

    @sgl.function
    def prog(s, x):
        s += "Answer in one word, and say it twice.\n" + x + ":" + sgl.gen("a", max_tokens=3)

    try:
        cfg.verbosity, cfg.skip_special_tokens_in_output, cfg.enable_precache_with_tracing = 2, False, False
        prog.run(x="hi", backend=Runtime(engine=eng))
        assert "twice.\nhi:hi" in capsys.readouterr().out
        assert eng.gen_calls()[0]["sampling_params"]["skip_special_tokens"] is False
        prog.run_batch([{"x": "a"}, {"x": "b"}], backend=Runtime(engine=eng))
        assert eng.prefill_calls() == []   # no precache of the shared first line
    finally:
        cfg.verbosity, cfg.skip_special_tokens_in_output, cfg.enable_precache_with_tracing = 0, True, True
    prog.run_batch([{"x": "a"}, {"x": "b"}], backend=Runtime(engine=eng))
    assert [c["prompt"] for c in eng.prefill_calls()] == ["Answer in one word, and say it twice.\n"]


# --- typed output ---------------------------------------------------------------------------------------------
def test_regex_constants_are_sglangs():
    assert (REGEX_INT, REGEX_FLOAT, REGEX_BOOL, REGEX_STR) == (
        r"[-+]?[0-9]+[ \n]*", r"[-+]?[0-9]*\.?[0-9]+[ \n]*", r"(True|False)", r"\"[\w\d\s]*\"")


def test_numbers_stop_at_a_space_or_newline_added_to_the_gens_stops():
    eng = FakeEngine(respond=lambda p, sp: "24")

    @sgl.function
    def prog(s):
        s += "Hours: " + sgl.gen_int("h", stop=".") + "\nPi: " + sgl.gen("pi", dtype=float)

    prog.run(backend=Runtime(engine=eng), stop=["!"])
    h, pi = (c["sampling_params"] for c in eng.gen_calls())
    assert h["stop"] == [".", " ", "\n"] and pi["stop"] == ["!", " ", "\n"]   # gen's stop, else the run's
    assert h["regex"].startswith(r"[-+]?[0-9]+") and pi["regex"].startswith(r"[-+]?[0-9]*\.?[0-9]+")


def test_typed_gens_on_the_engine_end_where_sglangs_do(tokenizer):
    """The number's regex admits a token that begins with the stop (" hours"), which ends the gen there; a
    string is JSON (no raw tab). Checked on the grammar the engine compiles."""
    from sglite.lang.sampling import DTYPES
    from sglite.runtime.constrained import GrammarCompiler

    compiler = GrammarCompiler(tokenizer)

    def accepts(regex, text):
        m = compiler.compile_regex(regex).matcher()
        return all(m.accept_token(t) for t in tokenizer.encode(text)) and m.is_accepting()

    assert accepts(DTYPES[int].regex, "24") and accepts(DTYPES[int].regex, "24 hours")
    assert not accepts(DTYPES[int].regex, "24hours") and not accepts(DTYPES[int].regex, " 24")
    assert accepts(DTYPES[float].regex, "3.14\nnext")
    assert accepts(DTYPES[str].regex, '"Paris, France"') and not accepts(DTYPES[str].regex, '"a\tb"')


def test_gen_int_on_the_tiny_model_is_an_int(tiny_runtime):
    @sgl.function
    def prog(s):
        s += "n =" + sgl.gen_int("n", max_tokens=8) + "."

    for seed in range(3):
        s = prog.run(backend=tiny_runtime, temperature=1.0, seed=seed)
        assert s.error() is None
        int(s["n"])   # the stop string cut anything after the digits


# --- streaming with meta data ------------------------------------------------------------------------------------
def test_text_async_iter_with_meta_data_on_the_engine(tiny_runtime):
    """SGLang's test_stream_logprobs checks, on the tiny model: non-empty chunks, logprob increments that add up
    to completion_tokens, and output_token_logprobs_length counting them."""
    @sgl.function
    def qa(s):
        s += sgl.user("Hi")
        s += sgl.assistant(sgl.gen("answer", return_logprob=True))

    async def collect():
        st = qa.run(stream=True, backend=tiny_runtime, temperature=0, max_new_tokens=12, ignore_eos=True)
        return st, [c async for c in st.text_async_iter("answer", return_meta_data=True)]

    st, chunks = asyncio.run(collect())
    assert chunks and all(text for text, _ in chunks)
    done = 0
    for _, meta in chunks:
        assert meta["completion_tokens"] == meta["output_token_logprobs_length"]
        assert len(meta["output_token_logprobs"]) == meta["completion_tokens"] - done
        done = meta["completion_tokens"]
    assert "".join(t for t, _ in chunks) == st["answer"]
    total = st.get_meta_info("answer")   # the variable's meta: every increment, the final totals
    assert len(total["output_token_logprobs"]) == total["completion_tokens"] == 12


def test_text_async_iter_without_meta_yields_text():
    eng = FakeEngine(respond=lambda p, sp: "one two three")

    @sgl.function
    def prog(s):
        s += "Count:" + sgl.gen("c")

    async def collect():
        st = prog.run(stream=True, backend=Runtime(engine=eng))
        return [c async for c in st.text_async_iter("c")], [c async for c in st.text_async_iter()]

    var_chunks, all_chunks = asyncio.run(collect())
    assert "".join(var_chunks) == "one two three" and "".join(all_chunks) == "Count:one two three"


# --- num_api_spec_tokens ----------------------------------------------------------------------------------------
CHARACTER = "Name:{name}\nBirthday:{birthday}\nJob:{job}\n"


def _character(s):
    s += "Make a character.\n"
    s += "Name:" + sgl.gen("name", stop="\n") + "\nBirthday:" + sgl.gen("birthday", stop="\n")
    s += "\nJob:" + sgl.gen("job", stop="\n") + "\n"


def test_completion_speculation_serves_several_gens_from_one_call():
    written = " Ada Lovelace\nBirthday: December 10, 1815\nJob: Mathematician\nName: Charles"
    eng = FakeEngine(respond=lambda p, sp: written if p.endswith("Name:") else " ???")
    spec = sgl.function(num_api_spec_tokens=200)(_character)
    be = Runtime(engine=eng)
    s = spec.run(backend=be, temperature=0)
    assert (s["name"], s["birthday"], s["job"]) == (" Ada Lovelace", " December 10, 1815", " Mathematician")
    calls = eng.gen_calls()
    assert len(calls) == 1 and "stop" not in calls[0]["sampling_params"]
    assert calls[0]["sampling_params"]["max_new_tokens"] == 200   # max(the gen's 128, num_api_spec_tokens)
    assert be.token_usage is be.usage and be.token_usage.requests == 1   # SGLang's name for the counters
    plain = sgl.function(_character)
    eng2 = FakeEngine(respond=lambda p, sp: " x")
    plain.run(backend=Runtime(engine=eng2))
    assert len(eng2.gen_calls()) == 3


def test_completion_speculation_calls_again_where_the_program_differs():
    # the model wrote "Birthday:" where the program writes "\nBirthday:" next: the rest is dropped
    eng = FakeEngine(respond=lambda p, sp: " Ada\nJob: none" if p.endswith("Name:") else " 1815\nJob: poet\n")
    s = sgl.function(num_api_spec_tokens=16)(_character).run(backend=Runtime(engine=eng))
    assert (s["name"], s["birthday"], s["job"]) == (" Ada", " 1815", " poet")
    assert len(eng.gen_calls()) == 2


def test_completion_speculation_writes_on_where_its_call_was_cut_short():
    from sglite.lang.sampling import GenOptions, GenParams
    from sglite.lang.api_speculation import CompletionSpeculation

    replies = iter([("Ada\nBirth", {"finish_reason": {"type": "length"}}), ("May 1\nJob", {})])
    asked = []

    def call(params):
        asked.append(params.sampling)
        return next(replies)

    spec = CompletionSpeculation(num_tokens=4)
    until_newline = GenOptions.from_kwargs(stop="\n", max_tokens=2).over(GenParams())
    assert spec.gen(until_newline, call) == ("Ada", {"finish_reason": {"type": "length"}})
    spec.fill("\n")
    assert spec.gen(until_newline, call) == ("May 1", {})   # "Birth" was cut short: written on from here
    assert [(p.stop, p.max_new_tokens) for p in asked] == [((), 4), ((), 4)]
    assert spec.text == "\nJob"


def test_completion_speculation_leaves_unstoppable_gens_alone():
    eng = FakeEngine(respond=lambda p, sp: "7")

    @sgl.function(num_api_spec_tokens=32)
    def prog(s):
        s += "a:" + sgl.gen("a", max_tokens=4) + " b:" + sgl.gen_int("b") + " c:" + sgl.gen("c", stop="\n")

    s = prog.run(backend=Runtime(engine=eng))
    assert s.error() is None and len(eng.gen_calls()) == 3   # no stop; a regex; then one speculative call
    assert "regex" in eng.gen_calls()[1]["sampling_params"]
    with pytest.raises(ValueError, match="positive int"):
        sgl.function(num_api_spec_tokens=0)(_character)


def _openai_chat(reply):
    """An OpenAI chat backend whose server answers every request with `reply(body)`."""
    seen = []

    def handler(request):
        body = json.loads(request.content)
        seen.append(body)
        text = reply(body)
        return httpx.Response(200, json={"id": "x", "choices": [{"index": 0, "finish_reason": "stop",
                                                                "message": {"role": "assistant", "content": text}}],
                                         "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://fake")
    return sgl.OpenAI("m", base_url="http://fake/v1", client=client), seen


@sgl.function(num_api_spec_tokens=64)
def chat_character(s):
    s += sgl.system("You are helpful.")
    s += sgl.user("Make a character.")
    s += sgl.assistant("Name:" + sgl.gen("name", stop="\n") + "\nBirthday:" + sgl.gen("birthday", stop="\n")
                       + "\nJob:" + sgl.gen("job", stop="\n"))


def test_chat_speculation_writes_an_assistant_block_in_one_call():
    backend, seen = _openai_chat(lambda body: "Name: Ada\nBirthday: 1815\nJob: poet")
    s = chat_character.run(backend=backend, temperature=0)
    assert s.error() is None, s.error()
    assert (s["name"], s["birthday"], s["job"]) == (" Ada", " 1815", " poet")
    assert len(seen) == 1 and seen[0]["max_tokens"] == 64 and "stop" not in seen[0]
    assert seen[0]["messages"][-1] == {"role": "user", "content": "Make a character."}
    assert s.messages()[-1] == {"role": "assistant", "content": "Name: Ada\nBirthday: 1815\nJob: poet"}
    assert backend.token_usage.prompt_tokens == 10


def test_chat_speculation_asks_again_then_fails_clearly():
    replies = iter(["Sure! Here it is", "Name: Ada\nBirthday: 1815\nJob: poet"])
    backend, seen = _openai_chat(lambda body: next(replies))
    s = chat_character.run(backend=backend)
    assert s.error() is None and s["job"] == " poet" and len(seen) == 2

    backend, seen = _openai_chat(lambda body: "I cannot do that.")
    s = chat_character.run(backend=backend)
    assert len(seen) == 3 and "did not follow the program's text" in str(s.error())
    with pytest.raises(sgl.ProgramError):
        s["name"]


def test_chat_speculation_variable_read_inside_the_block_says_when_it_is_ready():
    backend, _ = _openai_chat(lambda body: "Name: Ada")

    @sgl.function(num_api_spec_tokens=16)
    def prog(s):
        with s.assistant():
            s += "Name:" + sgl.gen("name", stop="\n")
            s["name"]

    with pytest.raises(RuntimeError, match="when its assistant block ends"):
        prog.run(backend=backend)
