"""SGLang's own frontend test programs, run unchanged against sglite on the real default model (slow).

The programs are `sglang/test/test_programs.py` from SGLang's package, installed with `pip install --no-deps
sglang==SGLANG_VERSION` (.ci/run does it) and read from there; while they run, `import sglang` gives sglite
(tests/lang/sglang_shim). Each program runs on its own `sgl.Runtime` over the one loaded model (fp32, the
reference weights), so its samples depend on nothing run before it.

A program ends one of three ways, and EXPECTED says which for each:
- passed;
- failed an answer check: its own assert, or its own parse of the model's output, failed (a 135M model does
  not know the capital of the United States). EXPECTED keeps a piece of the answer the model gave, so a change
  in what the model says shows too;
- raised: anything else. Only two programs may: image_qa (images are out of scope: sglite serves text-only
  models) and gen_min_new_tokens (it imports SGLang's server tokenizer helper, not frontend API).
"""
from __future__ import annotations

import importlib.metadata
import inspect
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

import sglite as sgl
from sglite.protocol import RequestError

from .sglang_shim import aliased, load_programs, programs_path

pytestmark = pytest.mark.slow

SGLANG_VERSION = "0.5.23"   # .ci/run installs this one; EXPECTED is what its programs do
SGLITE_DIR = str(Path(sgl.__file__).resolve().parent)


@dataclass(frozen=True)
class Outcome:
    kind: str          # "passed" | "answer" (an answer check failed) | "raised"
    detail: str = ""   # the model's answer, or the error

    def __str__(self) -> str:
        return self.kind if not self.detail else f"{self.kind}: {self.detail[:200]!r}"


PASSED = Outcome("passed")


def answer(fragment: str) -> Outcome:
    return Outcome("answer", fragment)


def raised(fragment: str) -> Outcome:
    return Outcome("raised", fragment)


# What each program does on SmolLM2-135M-Instruct (fp32). For "answer" and "raised", the detail is a piece of
# what the run must show: the model's answer (the program's `answer` variable, else its check's message), or
# the error.
EXPECTED = {
    "chat_completion_speculative": PASSED,
    "completion_speculative": PASSED,
    "decode_int": PASSED,
    "decode_json": PASSED,
    "decode_json_regex": PASSED,
    "dtype_gen": PASSED,
    "expert_answer": answer("A) A Frenchman is a person who is French."),   # wants "paris"
    "few_shot_qa": answer("answer:  New York"),          # the capital of the United States
    "gen_min_new_tokens": raised("No module named 'sglang.srt.utils.hf_transformers_utils'"),
    "image_qa": raised("NotImplementedError: sglite serves text-only models"),
    "mt_bench": PASSED,
    "parallel_decoding": PASSED,
    "parallel_encoding": answer("''"),    # ends its turn at once; wants "Noah" (who is the father of Julian)
    "react": answer("'linux'"),           # where the creator of Linux lives: wants "finland" or "states"
    "regex": PASSED,
    "select": PASSED,
    "stream": PASSED,
    "stream_logprobs": PASSED,
    "tool_use": PASSED,
}

# Arguments as SGLang's own runtime-backend test (test/lang/test_srt_backend.py) passes them
ARGUMENTS = {"select": {"check_answer": False}}


def _is_answer_check(error: BaseException) -> bool:
    """The program's own check of the model's output failed: an assert, or a ValueError from parsing the
    output (json.loads, int()), raised with no sglite code on the way."""
    if not isinstance(error, (AssertionError, ValueError)) or isinstance(error, RequestError):
        return False
    return not any(frame.filename.startswith(SGLITE_DIR) for frame in traceback.extract_tb(error.__traceback__))


def _answer_of(error: BaseException, programs_file: str) -> str:
    """The model's answer as the failing program holds it: its local `answer`/`answers`, else the check's
    message, else the program's text."""
    tb, frame_locals = error.__traceback__, {}
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == programs_file:
            frame_locals = tb.tb_frame.f_locals
        tb = tb.tb_next
    for name in ("answer", "answers"):
        if name in frame_locals:
            return repr(frame_locals[name])
    if str(error):
        return str(error)
    state = frame_locals.get("ret") or frame_locals.get("state")
    return state.text() if hasattr(state, "text") else ""


def run_program(programs, name: str) -> Outcome:
    func = getattr(programs, "test_" + name)
    try:
        func(**ARGUMENTS.get(name, {}))
    except Exception as e:   # noqa: BLE001 - the outcome is what this test records
        if _is_answer_check(e):
            return Outcome("answer", _answer_of(e, programs.__file__))
        return Outcome("raised", f"{type(e).__name__}: {e}")
    return PASSED


@pytest.fixture(scope="module")
def programs():
    path = programs_path()
    if path is None:
        pytest.skip(f"SGLang's package is not installed: pip install --no-deps sglang=={SGLANG_VERSION} "
                    "(.ci/run installs it)")
    version = importlib.metadata.version("sglang")
    if version != SGLANG_VERSION:
        pytest.skip(f"EXPECTED is for SGLang {SGLANG_VERSION}'s programs; sglang {version} is installed")
    with aliased():
        yield load_programs(path)


def test_the_table_names_every_program(programs):
    found = {n[len("test_"):] for n, f in vars(programs).items() if n.startswith("test_") and inspect.isfunction(f)}
    assert found == set(EXPECTED), f"programs not in EXPECTED: {found - set(EXPECTED)}; gone: {set(EXPECTED) - found}"
    assert sum(o == PASSED for o in EXPECTED.values()) >= 13


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sglang_program(programs, real_model, name):
    previous = sgl.get_default_backend(create=False)
    with sgl.Runtime(real_model, max_total_tokens=16384, max_running_requests=16) as rt:
        sgl.set_default_backend(rt)
        try:
            outcome = run_program(programs, name)
        finally:
            sgl.set_default_backend(previous)
    print(f"{name}: {outcome}")
    expected = EXPECTED[name]
    ok = outcome == expected if expected.kind == "passed" else (
        outcome.kind == expected.kind and expected.detail in outcome.detail)
    assert ok, (f"SGLang's test_{name}: expected {expected}, got {outcome}. If the model now answers otherwise "
                "because of an intended engine change, update EXPECTED with its answer")
