"""One pydantic model, one grammar: `sgl.gen(json_schema=Model)`, `Engine.generate(sampling_params={"json_schema":
Model})` and `sglite extract` with the model's schema written to a file all send the same schema text, made by
protocol's `json_schema_text` (objects closed)."""
from __future__ import annotations

import json

from pydantic import BaseModel

import sglite as sgl
from sglite.extract import main as extract_main
from sglite.protocol import SamplingParams, json_schema_text

from .fake_engine import FakeEngine


class Address(BaseModel):
    city: str
    zip: str | None = None


class Person(BaseModel):
    name: str
    age: int
    tags: list[str] = []
    address: Address


def _lang_schema_text() -> str:
    eng = FakeEngine(respond=lambda p, sp: "{}")

    @sgl.function
    def prog(s):
        s += "Person: " + sgl.gen("p", json_schema=Person, max_tokens=8)

    assert prog.run(backend=sgl.Runtime(engine=eng)).error() is None
    return eng.gen_calls()[0]["sampling_params"]["json_schema"]


def _extract_schema_text(tmp_path) -> str:
    (tmp_path / "s.json").write_text(json.dumps(Person.model_json_schema(), indent=2))
    (tmp_path / "p.txt").write_text("Extract the person.")
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": 1, "text": "Ann, 31, of Oslo."}) + "\n")
    eng = FakeEngine(respond=lambda p, sp: "{}")
    extract_main(["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"),
                  "--input", str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "o.jsonl")],
                 backend=sgl.Runtime(engine=eng))
    return eng.gen_calls()[0]["sampling_params"]["json_schema"]


def test_every_entry_point_sends_the_same_schema_text(tmp_path):
    expected = json_schema_text(Person)
    assert json.loads(expected)["additionalProperties"] is False
    assert json.loads(expected)["$defs"]["Address"]["additionalProperties"] is False
    engine_text = SamplingParams.from_dict({"json_schema": Person}).json_schema   # Engine.generate's dict API
    assert _lang_schema_text() == engine_text == _extract_schema_text(tmp_path) == expected


def test_gen_and_engine_generate_give_the_same_constrained_output(tiny_runtime):
    prompt = "Describe a person as JSON: "

    @sgl.function
    def prog(s):
        s += prompt + sgl.gen("p", json_schema=Person, max_tokens=24, temperature=0)

    s = prog.run(backend=tiny_runtime)
    assert s.error() is None
    direct = tiny_runtime.engine.generate(prompt, {"json_schema": Person, "max_new_tokens": 24, "temperature": 0})
    assert s["p"] == direct["text"] and s["p"].startswith("{")
