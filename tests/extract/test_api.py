"""The Python API (what the CLI calls) on the scripted engine: lines as they finish, spans, the lines decided
before generation (empty, over the context), chunked documents and their merge, re-asking on a pydantic
validator, and the plain prompt of a model without a chat template."""
from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, model_validator

import sglite as sgl
from sglite.extract import extract
from sglite.extract.chunking import chunk_bounds, merge_records
from tests.lang.fake_engine import FakeEngine

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def _doc(prompt: str) -> str:
    return prompt.rstrip().rsplit("\n\n", 1)[-1]


def _person(prompt, sp):
    doc = _doc(prompt)
    digits = "".join(ch for ch in doc.split(".")[0] if ch.isdigit())
    return json.dumps({"name": doc.split()[0], "age": int(digits or 0)})


def test_lines_with_spans_from_python():
    rt = sgl.Runtime(engine=FakeEngine(respond=_person))
    lines = {x["id"]: x for x in extract(["Ann is 31.", ("b", "Bo is 7.")], SCHEMA, "Extract the person.", backend=rt)}
    assert lines[0]["record"] == {"name": "Ann", "age": 31}
    assert lines[0]["spans"]["/age"] == {"start": 7, "end": 9, "match": "exact"}
    assert lines["b"]["record"] == {"name": "Bo", "age": 7}
    no_spans = list(extract(["Ann is 31."], SCHEMA, "Extract the person.", backend=rt, spans=False))
    assert "spans" not in no_spans[0]


def test_empty_and_overlong_documents_are_error_lines_before_generation():
    eng = FakeEngine(respond=_person, max_context=64)
    docs = [("e", "  \n\t"), ("long", "word " * 200), ("ok", "Ann is 31.")]
    lines = {x["id"]: x for x in extract(docs, SCHEMA, "Extract.", backend=sgl.Runtime(engine=eng))}
    assert lines["e"]["record"] is None and lines["e"]["error"].startswith("empty document")
    assert lines["long"]["record"] is None and "context holds 64" in lines["long"]["error"]
    assert "--chunk-tokens" in lines["long"]["error"]
    assert lines["ok"]["record"] == {"name": "Ann", "age": 31}
    prompts = [c["prompt"] for c in eng.gen_calls()]
    assert prompts and not any("word word" in p for p in prompts)   # neither ran


def test_a_long_document_runs_in_chunks_merged_with_spans_into_the_whole_text():
    schema = {"type": "object", "properties": {"name": {"type": ["string", "null"]},
                                               "age": {"type": ["integer", "null"]},
                                               "pets": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
              "required": ["name", "age", "pets"]}

    def respond(prompt, sp):   # each chunk: the first capitalised word, the first number, the words after "pet"
        words = _doc(prompt).replace(".", " ").split()
        names = [w for w in words if w[0].isupper() and w not in ("Pet",)]
        nums = [int(w) for w in words if w.isdigit()]
        pets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "pet"]
        return json.dumps({"name": names[0] if names else None, "age": nums[0] if nums else None, "pets": pets})

    text = ("filler " * 30 + "Ann is 31. pet cat. " + "filler " * 30 + "pet dog. Bob is 40. pet cat. "
            + "filler " * 30 + "pet fish. pet owl.")
    eng = FakeEngine(respond=respond, max_context=120)
    (line,) = extract([("d", text)], schema, "Extract.", backend=sgl.Runtime(engine=eng), chunk_tokens=60,
                      chunk_overlap=8)
    assert line["chunks"] >= 3 and len(eng.gen_calls()) == line["chunks"]
    assert line["record"] == {"name": "Ann", "age": 31, "pets": ["cat", "dog", "fish"]}   # cut at maxItems
    assert line["conflicts"] == {"/name": ["Ann", "Bob"], "/age": [31, 40]}
    where = line["spans"]["/age"]
    assert text[where["start"]:where["end"]] == "31" and where["start"] > 200   # into the whole document


def test_chunk_bounds_cover_the_text_with_overlap_and_merge_rule():
    text = " ".join(f"w{i}" for i in range(100))
    enc = lambda t: t.split(" ")                      # noqa: E731 - one token per word
    dec = lambda ids: " ".join(ids)                   # noqa: E731
    bounds = chunk_bounds(text, enc, dec, 30, 5)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(text)
    for (a0, a1), (b0, b1) in zip(bounds, bounds[1:]):
        assert b0 < a1 and a0 < b0                    # each chunk overlaps the previous one
    assert all(len(enc(text[a:b].strip())) <= 30 for a, b in bounds)
    with pytest.raises(ValueError, match="overlap"):
        chunk_bounds(text, enc, dec, 10, 10)
    merged, conflicts = merge_records([{"a": None, "l": [1]}, {"a": 2, "l": [1, 2]}, {"a": 3}], {})
    assert merged == {"a": 2, "l": [1, 2]} and conflicts == {"/a": [2, 3]}


class Span(BaseModel):
    start: int
    end: int

    @model_validator(mode="after")
    def ordered(self):
        if self.end < self.start:
            raise ValueError("end must not be before start")
        return self


def test_reask_sends_the_validator_error_back_and_counts_tries():
    def respond(prompt, sp):
        return '{"start": 5, "end": 9}' if "failed validation" in prompt else '{"start": 9, "end": 5}'
    eng = FakeEngine(respond=respond)
    (line,) = extract(["from 5 to 9"], Span, "Extract the span.", backend=sgl.Runtime(engine=eng), max_retries=2)
    assert line["record"] == {"start": 5, "end": 9} and line["tries"] == 2 and line["retried"] == [""]
    second = eng.gen_calls()[1]["prompt"]
    assert "end must not be before start" in second and second.startswith(eng.gen_calls()[0]["prompt"])
    # without retries the validator still runs: the record is an error line naming the problem
    (line,) = extract(["from 5 to 9"], Span, "Extract the span.", backend=sgl.Runtime(engine=FakeEngine(
        respond=lambda p, sp: '{"start": 9, "end": 5}')))
    assert line["record"] is None and "end must not be before start" in line["error"]


def test_bad_input_raises_before_anything_runs():
    eng = FakeEngine(respond=_person)
    with pytest.raises(Exception, match="uniqueItems"):
        list(extract(["x"], {"type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}},
                     "Extract.", backend=sgl.Runtime(engine=eng)))
    with pytest.raises(ValueError, match="duplicate document id"):
        list(extract([("a", "x"), ("a", "y")], SCHEMA, "Extract.", backend=sgl.Runtime(engine=eng)))
    with pytest.raises(ValueError, match="max_retries"):
        list(extract(["x"], SCHEMA, "Extract.", backend=sgl.Runtime(engine=eng), max_retries=1))
    assert not eng.calls


def test_plain_prompt_without_a_chat_template_and_roles_with_one():
    eng = FakeEngine(respond=_person)
    list(extract(["Ann is 31."], SCHEMA, "Extract the person.", backend=sgl.Runtime(engine=eng)))
    assert eng.gen_calls()[0]["prompt"] == "Extract the person.\n\nAnn is 31.\n\n"   # no "User:" role text
    eng2 = FakeEngine(respond=_person)
    eng2.tokenizer.chat_template = "{{ messages }}"
    eng2.tokenizer.apply_chat_template = lambda msgs, **kw: "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs) + (
        "<|im_start|>assistant\n" if kw.get("add_generation_prompt") else "")
    list(extract(["Ann is 31."], SCHEMA, "Extract the person.", backend=sgl.Runtime(engine=eng2)))
    assert "<|im_start|>user\nAnn is 31.<|im_end|>" in eng2.gen_calls()[0]["prompt"]


def test_a_chunk_size_over_the_context_is_refused_before_generation():
    eng = FakeEngine(respond=_person, max_context=64)
    with pytest.raises(Exception, match="--chunk-tokens 80 plus the prompt's"):
        list(extract([("d", "word " * 200)], SCHEMA, "Extract.", backend=sgl.Runtime(engine=eng), chunk_tokens=80))
    assert not eng.gen_calls()


def test_merge_prefers_a_value_found_in_its_own_chunk():
    records = [{"name": "Invented", "n": 1, "l": ["a"]}, {"name": "Ann", "n": 2, "l": ["b"]}]
    merged, conflicts = merge_records(records, {}, [set(), {"name"}])
    assert merged == {"name": "Ann", "n": 1, "l": ["a", "b"]}       # n: no chunk supports it, the first one
    assert conflicts == {"/name": ["Ann", "Invented"], "/n": [1, 2]}


def test_a_number_supports_its_field_only_with_the_fields_name_just_before_it():
    from sglite.extract.api import Extraction, job_spec
    schema = {"type": "object", "properties": {"revenue": {"type": "number"}, "eps": {"type": "number"},
                                               "net_income": {"type": "number", "title": "Net Income"},
                                               "company": {"type": "string"}}}
    job = Extraction(job_spec(schema, "Extract."), backend=None)
    text = ("Yarrow Corp. reported. The team completed 10 product launches. Total revenue reached A$3668.2 "
            "million and net income was A$783.4 million (diluted EPS of A$1.64).")
    assert job._supported({"revenue": 10, "eps": 10, "net_income": 10, "company": "Yarrow Corp."}, text) == \
        {"company"}
    assert job._supported({"revenue": 3668.2, "eps": 1.64, "net_income": 783.4, "company": "Nobody"}, text) == \
        {"revenue", "eps", "net_income"}
    # the merge then keeps the stated value over the first chunk's incidental one
    merged, _ = merge_records([{"revenue": 10}, {"revenue": 3668.2}], schema,
                              [job._supported({"revenue": 10}, text), job._supported({"revenue": 3668.2}, text)])
    assert merged == {"revenue": 3668.2}
