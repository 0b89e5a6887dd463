"""`sglite batch` on the tiny random-weight engine, in process: OpenAI batch output lines that the openai package's
types parse, equal to what the server's own routes answer for the same bodies; refusals as status lines; resume;
and bad files refused before anything runs, naming the line."""
from __future__ import annotations

import json

import httpx
import pytest

from sglite.extract.batch import main

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}}, "required": ["name"]}


@pytest.fixture(scope="module")
def engine():
    from sglite.runtime.engine import Engine
    from sglite.runtime.testing import load_tiny_model

    eng = Engine(model=load_tiny_model(max_context=512), max_running_requests=16, max_total_tokens=8192,
                 background=True)
    yield eng
    eng.shutdown()


def _requests() -> list[dict]:
    reqs = []
    for i in range(4):
        reqs.append({"custom_id": f"chat-{i}", "method": "POST", "url": "/v1/chat/completions", "body": {
            "model": "any-name", "messages": [{"role": "system", "content": "Extract the name as JSON."},
                                              {"role": "user", "content": f"Person {i} is called Ann{i}."}],
            "max_tokens": 24, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}})
    reqs.append({"custom_id": "text-0", "method": "POST", "url": "/v1/completions",
                 "body": {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}})
    reqs.append({"custom_id": "too-long", "method": "POST", "url": "/v1/completions",
                 "body": {"prompt": "word " * 600, "max_tokens": 8}})
    return reqs


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


async def _direct(engine, url, body):
    from sglite.server import ModelInfo, create_app
    app = create_app(engine, ModelInfo.from_engine(engine))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        return (await c.post(url, json=body)).json()


def test_batch_output_parses_and_equals_the_routes_answers(tmp_path, engine, capsys):
    import asyncio

    from openai.types import Completion
    from openai.types.chat import ChatCompletion

    reqs = _requests()
    src, out = _write(tmp_path / "in.jsonl", reqs), tmp_path / "out.jsonl"
    assert main([src, "-o", str(out)], engine=engine) == 1            # one request refused
    lines = {x["custom_id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert sorted(lines) == sorted(r["custom_id"] for r in reqs)
    assert lines["too-long"]["response"]["status_code"] == 400
    assert "context" in lines["too-long"]["response"]["body"]["error"]["message"]
    for r in reqs[:5]:
        line = lines[r["custom_id"]]
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200
        body = line["response"]["body"]
        kind = ChatCompletion if r["url"] == "/v1/chat/completions" else Completion
        parsed = kind.model_validate(body)
        direct = asyncio.run(_direct(engine, r["url"], {k: v for k, v in r["body"].items() if k != "model"}))
        if kind is ChatCompletion:
            assert parsed.choices[0].message.content == direct["choices"][0]["message"]["content"]
            json.loads(parsed.choices[0].message.content)           # the response_format held
        else:
            assert parsed.choices[0].text == direct["choices"][0]["text"]
        counts = ("prompt_tokens", "completion_tokens", "total_tokens")   # cached tokens depend on the cache
        assert [body["usage"][k] for k in counts] == [direct["usage"][k] for k in counts]
    assert "1 refused" in capsys.readouterr().out


def test_resume_runs_only_the_missing_custom_ids(tmp_path, engine):
    reqs = _requests()[:5]
    src, out = _write(tmp_path / "in.jsonl", reqs), tmp_path / "out.jsonl"
    assert main([src, "-o", str(out)], engine=engine) == 0
    kept = out.read_text().splitlines()[:3]
    out.write_text("\n".join(kept) + "\n" + kept[0][:25])          # two lost, one cut off
    assert main([src, "-o", str(out)], engine=engine) == 2          # neither --resume nor --overwrite
    assert main([src, "-o", str(out), "--resume"], engine=engine) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(r["custom_id"] for r in reqs)
    assert [json.loads(x) for x in kept] == lines[:3]


@pytest.mark.parametrize("change, says", [
    (lambda r: r.pop("custom_id"), "missing custom_id"),
    (lambda r: r.update(url="/v1/embeddings"), "url must be one of"),
    (lambda r: r["body"].update(max_token=5), "unrecognized request argument supplied: max_token"),
    (lambda r: r["body"].update(stream=True), "stream is not supported"),
    (lambda r: r.update(custom_id="chat-0"), "custom_id 'chat-0' is also on"),
])
def test_a_bad_line_is_refused_before_anything_runs(tmp_path, capsys, change, says):
    reqs = _requests()
    change(reqs[2])
    src = _write(tmp_path / "in.jsonl", reqs)
    assert main([src, "-o", str(tmp_path / "out.jsonl"), "--model", "/nonexistent.gguf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sglite batch: ") and "in.jsonl:3" in err and says in err and "\n" not in err
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()
