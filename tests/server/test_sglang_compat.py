"""/generate takes SGLang's whole request body: each GenerateReqInput field and SamplingParams key is carried out,
accepted as changing nothing here, or refused naming it (sglite/server/sglang_compat.py)."""
from __future__ import annotations

import ast
import importlib.util
import json
import threading
from pathlib import Path

import pytest

from sglite.protocol import FIELD_NAMES
from sglite.server.bodies import GenerateBody
from sglite.server.sglang_compat import NO_EFFECT, SINGLE_RANK, UNSUPPORTED

BODY = {"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}


def gen(http, **extra):
    body = {**BODY, **extra, "sampling_params": {**BODY["sampling_params"], **extra.get("sampling_params", {})}}
    return http.post("/generate", json=body)


# --- coverage of SGLang's own definitions (read from its installed source, not imported) ----------------------
def _sglang_class_fields(relpath: str, cls: str) -> list[str]:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the sglang package is not installed (.ci/run installs it)")
    tree = ast.parse((Path(list(spec.submodule_search_locations)[0]) / relpath).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def test_every_generate_req_input_field_is_handled():
    implemented = set(GenerateBody.model_fields)
    fields = _sglang_class_fields("srt/managers/io_struct.py", "GenerateReqInput")
    assert "sampling_params" in fields and "return_text_in_logprobs" in fields
    unhandled = [f for f in fields if f not in implemented | NO_EFFECT | SINGLE_RANK | set(UNSUPPORTED)]
    assert not unhandled, f"SGLang's GenerateReqInput fields sglite neither implements nor judges: {unhandled}"


# filled in by SGLang itself, never sent
SGLANG_INTERNAL_SAMPLING = {"stop_strs", "stop_regex_strs", "stop_str_max_len", "stop_regex_max_len", "is_normalized",
                            "ebnf_full_assistant"}
SERVER_SAMPLING = {"spaces_between_special_tokens", "stream_interval", "sampling_seed", "custom_params", "beam_width",
                   "structural_tag", "watermark"}


def test_every_sampling_param_is_handled():
    keys = _sglang_class_fields("srt/sampling/sampling_params.py", "SamplingParams")
    assert "stop_regex" in keys
    unhandled = [k for k in keys if k not in FIELD_NAMES | SGLANG_INTERNAL_SAMPLING | SERVER_SAMPLING]
    assert not unhandled, f"SGLang sampling keys sglite does not handle: {unhandled}"


# --- over HTTP ----------------------------------------------------------------------------------------------------
def test_sglang_frontend_sampling_keys_accepted(http):
    """What SGLang's RuntimeEndpoint sends for a plain gen."""
    sp = {"skip_special_tokens": True, "spaces_between_special_tokens": True, "max_new_tokens": 3,
          "min_new_tokens": 0, "n": 1, "stop": [], "stop_token_ids": [], "stop_regex": [], "temperature": 1.0,
          "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
          "ignore_eos": False, "regex": None, "json_schema": None}
    r = http.post("/generate", json={"text": "Hi", "sampling_params": sp, "return_logprob": None,
                                     "top_logprobs_num": None})
    assert r.status_code == 200, r.text


def test_no_effect_fields_are_accepted(http):
    r = gen(http, log_metrics=False, priority=3, routing_key="a", custom_labels={"team": "x"}, session_id="s",
            data_parallel_rank=0, conversation_id="c", image_data=None, lora_path=None, return_hidden_states=False,
            routed_experts_start_len=0)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("field,value", [("image_data", "http://x/cat.png"),
                                         ("return_hidden_states", True), ("token_ids_logprob", [1, 2]),
                                         ("custom_logit_processor", "x"), ("cache_salt", "s"),
                                         ("data_parallel_rank", 1), ("session_params", {"id": "x"})])
def test_unsupported_fields_are_refused_by_name(http, field, value):
    r = gen(http, **{field: value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == field and field in err["message"]


def test_an_adapter_this_server_has_not_loaded_is_refused_by_name(http):
    r = gen(http, lora_path="adapter")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "lora_path" and "no LoRA adapter named 'adapter'" in err["message"]


def test_unknown_field_is_refused(http):
    r = gen(http, retrun_logprob=True)
    assert r.status_code == 400 and r.json()["error"]["param"] == "retrun_logprob"
    r = gen(http, sampling_params={"stop_strs": ["x"]})   # SGLang-internal, never sent by a client
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop_strs"


@pytest.mark.parametrize("key,value", [("beam_width", 2), ("structural_tag", '{"x": 1}'), ("stream_interval", 0),
                                       ("spaces_between_special_tokens", "yes"), ("stop_regex", ["("]),
                                       ("logit_bias", {"99999999": 1.0})])
def test_bad_sampling_keys_are_refused_by_name(http, key, value):
    r = gen(http, sampling_params={key: value})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == key


def test_sampling_seed_is_seed(http):
    sp = {"temperature": 1.0, "max_new_tokens": 6}
    a = gen(http, sampling_params={**sp, "sampling_seed": 7}).json()
    b = gen(http, sampling_params={**sp, "seed": 7}).json()
    assert a["output_ids"] == b["output_ids"]
    assert gen(http, sampling_params={**sp, "seed": 7, "sampling_seed": 8}).status_code == 400


def test_greedy_below_epsilon(http):
    a = gen(http, sampling_params={"temperature": 1e-9, "max_new_tokens": 5}).json()
    b = gen(http, sampling_params={"temperature": 0, "max_new_tokens": 5}).json()
    assert a["output_ids"] == b["output_ids"]


def test_max_new_tokens_null_means_up_to_the_context(http, engine_and_info, real_engine):   # the engine clamps
    _, info = engine_and_info
    ids = [info.tokenizer.encode(" a")[0]] * (info.max_context - 4)
    r = http.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": None,
                                                                          "ignore_eos": True}})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 4


def test_return_text_in_logprobs(http):
    plain = gen(http, return_logprob=True, top_logprobs_num=2, logprob_start_len=0).json()["meta_info"]
    assert plain["output_token_logprobs"] and all(e[2] is None for e in plain["output_token_logprobs"])
    assert all(e[2] is None for row in plain["output_top_logprobs"] for e in row)
    assert all(e[2] is None for e in plain["input_token_logprobs"])
    texts = gen(http, return_logprob=True, top_logprobs_num=2, return_text_in_logprobs=True).json()["meta_info"]
    assert all(isinstance(e[2], str) for e in texts["output_token_logprobs"])
    assert [e[:2] for e in texts["output_token_logprobs"]] == [e[:2] for e in plain["output_token_logprobs"]]


def test_return_prompt_token_ids(http, engine_and_info):
    out = gen(http, return_prompt_token_ids=True).json()
    assert out["prompt_token_ids"] == engine_and_info[1].tokenizer.encode("Hello")


def test_stream_interval(http):
    body = {**BODY, "stream": True, "sampling_params": {"max_new_tokens": 7, "temperature": 0, "ignore_eos": True,
                                                        "stream_interval": 3}}
    with http.stream("POST", "/generate", json=body) as r:
        events = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts[-1] == 7 and all(b - a >= 3 for a, b in zip(counts, counts[1:-1]))
    assert len(events) <= 4


def test_stop_regex(http, real_engine):
    full = gen(http, sampling_params={"max_new_tokens": 12}).json()
    text = full["text"]
    if len(text) < 3:
        pytest.skip("greedy output too short to pick a stop regex from")
    pattern = "(?:" + "|".join(map(__import__("re").escape, text[1:3])) + ")"
    out = gen(http, sampling_params={"max_new_tokens": 12, "stop_regex": pattern}).json()
    if out["meta_info"]["finish_reason"]["matched"] is None:
        pytest.skip("the engine does not apply stop_regex yet (core.make_reqs must pass p.stop_regex to StopChecker)")
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}
    assert len(out["output_ids"]) < len(full["output_ids"]) and text.startswith(out["text"])


def test_rid_and_abort_request(http, server):
    import httpx

    body = {"text": "Hello", "rid": "my-request", "stream": True,
            "sampling_params": {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0}}
    done = threading.Event()
    events: list = []

    def read():
        with httpx.stream("POST", server.url + "/generate", json=body, timeout=60) as r:
            for ln in r.iter_lines():
                if ln.startswith("data: {"):
                    events.append(json.loads(ln[6:]))
        done.set()

    t = threading.Thread(target=read)
    t.start()
    while not events and t.is_alive():
        done.wait(0.05)
    assert http.post("/abort_request", json={"rid": "my-request"}).status_code == 200
    assert done.wait(30)
    t.join()
    last = events[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort", last
    assert last["meta_info"]["completion_tokens"] < 400


def test_model_info_aliases(http):
    info = http.get("/model_info").json()
    assert info == http.get("/get_model_info").json()
    assert info["chat_template"] == "chatml" and info["model_path"].startswith("chatml(tinyllama)/")
    assert http.get("/server_info").status_code == 200
