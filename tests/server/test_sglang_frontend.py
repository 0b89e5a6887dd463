"""SGLang's own frontend (`pip install --no-deps sglang` plus the light packages its `import sglang` needs, as
.ci/run installs them) runs gen, select, fork, regex, streaming and batch programs through
`sgl.RuntimeEndpoint` against `sglite serve`, unchanged. The programs run in a subprocess (sglang_programs.py):
`import sglang` patches transformers, which must not leak into this process."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).with_name("sglang_programs.py")


def _sglang_importable() -> str | None:
    """None if `import sglang` works in a fresh interpreter, else why not."""
    if importlib.util.find_spec("sglang") is None:
        return "the sglang package is not installed (.ci/run installs it: pip install --no-deps sglang==0.5.23)"
    r = subprocess.run([sys.executable, "-c", "import sglang.lang.backend.runtime_endpoint"], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        return f"`import sglang` fails: {r.stderr.strip().splitlines()[-1]} (see .ci/run for the packages it needs)"
    return None


@pytest.fixture(scope="module")
def sglang_results(server, real_engine):   # select needs prompt logprobs, which the fake engine has not
    why = _sglang_importable()
    if why:
        pytest.skip(why)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    r = subprocess.run([sys.executable, str(PROGRAMS), server.url], capture_output=True, text=True, timeout=600,
                       env=env, cwd=PROGRAMS.parent)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_sglang_picks_the_models_chat_template(sglang_results):
    # the tiny model has SmolLM2's tokenizer and template: ChatML
    assert sglang_results["chat_template"] == "chatml"
    text = sglang_results["chat_text"]
    assert text.startswith("<|im_start|>system\nYou answer in one word.<|im_end|>\n<|im_start|>user\n")
    assert "<|im_start|>assistant\n" in text and isinstance(sglang_results["chat_answer"], str)
    assert sglang_results["chat_finish"]["type"] in ("stop", "length")


def test_select(sglang_results):
    assert sglang_results["select"] in (" yes", " no", " maybe")
    meta = sglang_results["select_meta"]
    assert len(meta["normalized_prompt_logprobs"]) == 3


def test_fork_and_join(sglang_results):
    facts = sglang_results["facts"]
    assert len(facts) == 2 and all(isinstance(f, str) and "\n" not in f for f in facts)
    assert sglang_results["fork_text"].startswith("Three facts:\nDone.")


def test_regex_gen_int_and_stop_regex(sglang_results, grammar):
    assert re.fullmatch(r"[A-Z]{2}-[0-9]{3}", sglang_results["code"])
    assert re.fullmatch(r"[-+]?[0-9]+", sglang_results["count"])   # SGLang's REGEX_INT, stopped at a space
    assert isinstance(sglang_results["more"], str)   # stop_regex accepted (its effect: test_sglang_compat.py)


def test_logprobs_with_text(sglang_results):
    meta = sglang_results["logprob_meta"]
    lps = meta["output_token_logprobs"]
    assert len(lps) == meta["completion_tokens"] and all(isinstance(e[2], str) for e in lps)
    assert all(len(top) == 2 for top in meta["output_top_logprobs"])


def test_stream_and_batch(sglang_results):
    assert sglang_results["stream_text"].endswith("".join(sglang_results["stream_pieces"][-1:]))
    assert "".join(sglang_results["stream_pieces"]) in sglang_results["stream_text"]
    assert len(sglang_results["batch_answers"]) == 2
