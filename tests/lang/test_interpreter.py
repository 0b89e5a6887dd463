"""Interpreter semantics against the scripted FakeEngine: ordering, defaults, run-ahead, roles, fork, errors,
streaming, run_batch."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

import sglite as sgl
from sglite.backend.runtime import Runtime
from sglite.lang.chat_template import ChatTemplate

from .fake_engine import FakeEngine


def test_import_is_light():
    code = "import sys, sglite as sgl; sgl.function; sgl.gen('x'); assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gen_appends_and_orders_calls():
    eng = FakeEngine(respond=lambda p, sp: "blue" if "sky" in p else "Paris")
    be = Runtime(engine=eng)

    @sgl.function
    def prog(s, country):
        s += f"The capital of {country} is "
        s += sgl.gen("capital", max_tokens=4)
        s += ". The sky is "
        s += sgl.gen("color", max_tokens=4)

    s = prog.run(country="France", backend=be)
    assert s["capital"] == "Paris" and s["color"] == "blue"
    assert s.text() == "The capital of France is Paris. The sky is blue"
    prompts = [c["prompt"] for c in eng.gen_calls()]
    assert prompts == ["The capital of France is ", "The capital of France is Paris. The sky is "]


def test_run_defaults_merge_with_gen_options():
    eng = FakeEngine()
    be = Runtime(engine=eng)

    @sgl.function
    def prog(s):
        s += "a" + sgl.gen("x", max_tokens=3, stop=["\n"])
        s += sgl.gen("y")

    prog.run(backend=be, temperature=0.5, max_new_tokens=7)
    first, second = (c["sampling_params"] for c in eng.gen_calls())
    assert first == {"max_new_tokens": 3, "temperature": 0.5, "stop": ["\n"]}
    assert second == {"max_new_tokens": 7, "temperature": 0.5}


def test_program_argument_named_like_an_option_stays_an_argument():
    be = Runtime(engine=FakeEngine())

    @sgl.function
    def prog(s, temperature):
        s += f"t={temperature}"

    assert prog.run(temperature="hot", backend=be).text() == "t=hot"


def test_python_runs_ahead_while_calls_are_in_flight():
    eng = FakeEngine(latency=0.3)
    be = Runtime(engine=eng)
    marks = {}

    @sgl.function
    def prog(s):
        s += "q" + sgl.gen("a")
        marks["after_submit"] = time.monotonic()
        marks["value"] = s["a"]          # blocks until produced
        marks["after_read"] = time.monotonic()

    t0 = time.monotonic()
    prog.run(backend=be)
    assert marks["after_submit"] - t0 < 0.15
    assert marks["after_read"] - t0 >= 0.3 and marks["value"] == "ok"


def test_unknown_option_fails_at_construction():
    with pytest.raises(TypeError, match="did you mean 'max_tokens'"):
        sgl.gen("x", max_tokns=3)
    with pytest.raises(sgl.RequestError, match="fork") as e:
        sgl.gen("x", n=2)
    assert e.value.param == "n"
    with pytest.raises(ValueError, match="non-empty"):
        sgl.select("x", [])
    sgl.gen("x", regex="(")   # the grammar compiler judges a regex, when the program runs


def test_dtype_and_pydantic_schema():
    import json

    from pydantic import BaseModel

    class Rec(BaseModel):
        name: str
        n: int

    g = sgl.gen("r", json_schema=Rec)
    assert json.loads(g.params.sampling["json_schema"])["properties"]["n"]["type"] == "integer"
    # pydantic ignores extras anyway
    assert json.loads(g.params.sampling["json_schema"])["additionalProperties"] is False
    assert sgl.gen_int("i").params.sampling["regex"] == r"[-+]?[0-9]+(?:[ \n][\s\S]*)?"
    eng = FakeEngine(respond=lambda p, sp: "42")
    s = sgl.function(lambda s: s.__iadd__("N:" + sgl.gen("n", dtype=int))).run(backend=Runtime(engine=eng))
    assert s["n"] == "42" and eng.gen_calls()[0]["sampling_params"]["stop"] == [" ", "\n"]


def test_roles_render_with_chat_template_and_messages():
    be = Runtime(engine=FakeEngine(respond=lambda p, sp: "Hello!"))

    @sgl.function
    def chat(s):
        s += sgl.system("Be brief.")
        with s.user():
            s += "Hi"
        s += sgl.assistant(sgl.gen("reply"))

    s = chat.run(backend=be)
    t = ChatTemplate.plain()
    assert s.text() == "System: Be brief.\nUser: Hi\nAssistant: Hello!\n"
    assert s.messages() == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello!"}]
    assert t.name == "plain"


def test_chat_template_from_model_template(tokenizer):
    t = ChatTemplate.from_renderer(tokenizer.apply_chat_template)
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    ours = t.begin("user", first_role=True) + "Hi" + t.end("user") + t.begin("assistant", False) + "Yo" + t.end("assistant")
    assert ours == tokenizer.apply_chat_template(msgs, add_generation_prompt=False)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    ours = t.begin("system", True) + "S" + t.end("system") + t.begin("user", False) + "U" + t.end("user")
    assert ours + t.prefix["assistant"] == tokenizer.apply_chat_template(msgs, add_generation_prompt=True)


def test_fork_commits_prefix_then_runs_branches_concurrently():
    eng = FakeEngine(respond=lambda p, sp: "idea", latency=0.25)
    be = Runtime(engine=eng)

    @sgl.function
    def tot(s, topic):
        s += f"Topic: {topic}. Let us think about it in three ways.\n"
        forks = s.fork(3)
        forks += lambda i: f"Way {i + 1}: "
        forks += sgl.gen("way", max_tokens=8)
        forks.join()
        for i, f in enumerate(forks):
            s += f"{i}:{f['way']}\n"

    t0 = time.monotonic()
    s = tot.run(topic="tea", backend=be)
    elapsed = time.monotonic() - t0
    assert s["way"] == ["idea", "idea", "idea"]
    assert s.text().endswith("0:idea\n1:idea\n2:idea\n")
    prefill = eng.prefill_calls()
    assert prefill and prefill[0]["prompt"] == "Topic: tea. Let us think about it in three ways.\n"
    gens = eng.gen_calls()
    assert all(g["start"] >= prefill[0]["end"] for g in gens)
    assert elapsed < 3 * 0.25 + 0.2   # the three branch calls overlapped
    assert be.usage.cached_tokens > 0


def test_errors_are_reported_per_program_in_a_batch():
    eng = FakeEngine(fail_on="BOOM")
    be = Runtime(engine=eng)

    @sgl.function
    def prog(s, x):
        s += f"Input {x}: " + sgl.gen("y")

    states = prog.run_batch([{"x": "a"}, {"x": "BOOM"}, {"x": "c"}], backend=be)
    assert [st.error() is None for st in states] == [True, False, True]
    assert "scripted failure" in str(states[1].error())
    assert states[0]["y"] == "ok" and states[2]["y"] == "ok"
    with pytest.raises(sgl.ProgramError, match="not produced"):
        states[1]["y"]


def test_exception_in_program_body_is_reported_in_batch():
    be = Runtime(engine=FakeEngine())

    @sgl.function
    def prog(s, x):
        s += "v" + sgl.gen("y")
        if x == 1:
            raise ValueError("bad input")

    states = prog.run_batch([{"x": 0}, {"x": 1}], backend=be)
    assert states[0].error() is None and isinstance(states[1].error(), ValueError)


def test_run_raises_program_exceptions():
    be = Runtime(engine=FakeEngine())

    @sgl.function
    def prog(s):
        raise KeyError("nope")

    with pytest.raises(KeyError):
        prog.run(backend=be)


def test_run_batch_prefills_shared_prefix_once_and_keeps_order():
    eng = FakeEngine(respond=lambda p, sp: p.split("Doc: ")[-1].split("\n")[0].upper(), latency=0.05)
    be = Runtime(engine=eng)
    shots = "You label documents. Example: Doc: apple\nLabel: APPLE\n" * 3

    @sgl.function
    def label(s, doc):
        s += shots
        s += f"Doc: {doc}\nLabel: "
        s += sgl.gen("label", stop="\n")

    docs = [f"d{i}" for i in range(8)]
    states = label.run_batch([{"doc": d} for d in docs], backend=be, progress_bar=True, num_threads=4)
    assert [st["label"] for st in states] == [d.upper() for d in docs]
    prefill = eng.prefill_calls()
    assert len(prefill) == 1 and shots.startswith(prefill[0]["prompt"]) and len(prefill[0]["prompt"]) > 100
    assert all(g["start"] >= prefill[0]["end"] for g in eng.gen_calls())
    assert be.usage.cache_hit_rate > 0.5


def test_streaming_text_iter_and_async():
    eng = FakeEngine(respond=lambda p, sp: "one two three")
    be = Runtime(engine=eng)

    @sgl.function
    def prog(s):
        s += "Count:"
        s += sgl.gen("c")
        s += "."

    s = prog.run(backend=be, stream=True)
    assert list(s.text_iter()) == ["Count:", "one", " two", " three", "."]
    s = prog.run(backend=be, stream=True)
    assert "".join(s.text_iter("c")) == "one two three"

    async def collect():
        st = prog.run(backend=be, stream=True)
        return [x async for x in st]
    assert "".join(asyncio.run(collect())) == "Count:one two three."


def test_var_scope_bind_and_composition():
    be = Runtime(engine=FakeEngine(respond=lambda p, sp: "X"))

    @sgl.function
    def inner(s, word):
        s += f"[{word}]"

    @sgl.function
    def outer(s, a, b):
        with s.var_scope("block"):
            s += a
            inner(s, "w")
        s += b + sgl.gen("g")

    s = outer.bind(b="!").run(a="A", backend=be)
    assert s["block"] == "A[w]" and s.text() == "A[w]!X"


def test_trace_prints_the_program_graph():
    @sgl.function
    def prog(s, q):
        s += sgl.user(q)
        s += sgl.assistant(sgl.gen("a", max_tokens=5))
        s += sgl.select("c", ["yes", "no"])

    tr = prog.trace()
    text = repr(tr)
    assert "Gen('a', max_new_tokens=5)" in text and "Select('c', choices=['yes', 'no']" in text
    assert "Text('{q}')" in text and "RoleBegin('user')" in text


def test_public_api_names_resolve():
    import sglite
    for name in sglite.__all__:
        if name != "Engine":
            assert getattr(sglite, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sglite.nope


def test_ir_reprs_are_readable():
    e = "Q: " + sgl.gen("a", max_tokens=3, stop="\n") + sgl.select("b", ["x", "y"])
    assert repr(e) == ("[Text('Q: '), Gen('a', max_new_tokens=3, stop='\\n'), "
                       "Select('b', choices=['x', 'y'], method=TokenLengthNormalized)]")
    assert repr(sgl.user("hi")) == "[RoleBegin('user'), Text('hi'), RoleEnd('user')]"


def test_run_batch_generator_style():
    be = Runtime(engine=FakeEngine(respond=lambda p, sp: p[-1]))

    @sgl.function
    def prog(s, x):
        s += x + sgl.gen("y")

    gen = prog.run_batch([{"x": "a"}, {"x": "b"}], backend=be, generator_style=True)
    assert [st["y"] for st in gen] == ["a", "b"]


def test_reading_a_variable_submitted_after_a_failure_raises_instead_of_hanging():
    be = Runtime(engine=FakeEngine(fail_on="BOOM", latency=0.05))

    @sgl.function
    def prog(s):
        s += "BOOM" + sgl.gen("a")
        time.sleep(0.2)                 # the first call has failed by now
        s += sgl.gen("b")
        return s["b"]

    with pytest.raises(sgl.ProgramError, match="scripted failure"):
        prog.run(backend=be)
