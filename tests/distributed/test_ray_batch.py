"""`sglite batch --ray ADDRESS`: the replicas answer an OpenAI batch file with the server's own handlers, each
line the same as the in-process path gives (greedy, same model and weight plan), refusals as status lines;
`--resume` runs only the custom_ids missing from the output; bad input is refused before any replica starts."""
from __future__ import annotations

import json

import pytest

from sglite.extract.batch import main

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}}, "required": ["name"]}


def _requests(n: int) -> list[dict]:
    reqs = []
    for i in range(n):
        reqs.append({"custom_id": f"chat-{i}", "method": "POST", "url": "/v1/chat/completions", "body": {
            "model": "any", "messages": [{"role": "system", "content": "Extract the name as JSON."},
                                         {"role": "user", "content": f"Person {i} is called Ann{i}."}],
            "max_tokens": 16, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}})
        reqs.append({"custom_id": f"text-{i}", "method": "POST", "url": "/v1/completions",
                     "body": {"prompt": f"Number {i} is", "max_tokens": 6, "temperature": 0}})
    reqs.append({"custom_id": "bad-regex", "method": "POST", "url": "/v1/chat/completions", "body": {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "response_format": {
            "type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "string", "pattern": "(("}}}}})
    return reqs


def _answers(path) -> dict[str, tuple]:
    out = {}
    for row in map(json.loads, path.read_text().splitlines()):
        resp = row["response"]
        choice = (resp["body"].get("choices") or [{}])[0]
        out[row["custom_id"]] = (resp["status_code"], (choice.get("message") or {}).get("content", choice.get("text")))
    return out


@pytest.mark.slow   # starting Ray replicas: about 2 minutes on 2 shared cores
def test_ray_batch_equals_in_process_and_resumes(tmp_path, ray_cluster, tiny_path, capsys):
    from sglite.runtime.engine import Engine

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in _requests(6)))
    common = ["--model", str(tiny_path), "--weights", "bf16", "--num-threads", "1"]
    out = tmp_path / "ray.jsonl"
    assert main([str(inp), "-o", str(out), *common, "--ray", ray_cluster, "--replicas", "2",
                 "--shard-size", "3"]) == 1              # the bad regex is a 400 line
    ray_answers = _answers(out)

    eng = Engine(str(tiny_path), weights="bf16", background=True)
    try:
        assert main([str(inp), "-o", str(tmp_path / "local.jsonl")], engine=eng) == 1
    finally:
        eng.shutdown()
    local = _answers(tmp_path / "local.jsonl")
    assert set(ray_answers) == {r["custom_id"] for r in _requests(6)}
    assert ray_answers == local
    assert ray_answers["bad-regex"][0] == 400 and ray_answers["chat-0"][0] == 200

    # resume: drop three lines; only those run again, nothing else is rewritten
    kept, dropped = out.read_text().splitlines()[:-3], out.read_text().splitlines()[-3:]
    out.write_text("".join(x + "\n" for x in kept))
    refused_again = any(json.loads(x)["custom_id"] == "bad-regex" for x in dropped)
    assert main([str(inp), "-o", str(out), *common, "--ray", ray_cluster, "--replicas", "1", "--resume"]) == \
        (1 if refused_again else 0)
    lines = out.read_text().splitlines()
    assert lines[:len(kept)] == kept and len(lines) == len(ray_answers)
    assert _answers(out) == ray_answers


def test_ray_batch_bad_input_is_refused_before_replicas_start(tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}) + "\n")
    assert main([str(inp), "-o", str(tmp_path / "o.jsonl"), "--ray", "127.0.0.1:9"]) == 2
    assert "in.jsonl:1" in capsys.readouterr().err
    assert main([str(inp), "-o", str(tmp_path / "o.jsonl"), "--replicas", "2"]) == 2
    assert "--replicas and --shard-size go with --ray" in capsys.readouterr().err
    assert main([str(inp), "-o", str(tmp_path / "o.jsonl"), "--ray", "--url", "http://x"]) == 2
