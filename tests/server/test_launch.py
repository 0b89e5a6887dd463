"""`sglite serve` argument handling (the server itself is exercised by the other tests)."""
from __future__ import annotations

import pytest

from sglite.server.launch import ServerThread, _is_loopback, build_parser, engine_options, main


def test_defaults_bind_loopback():
    args = build_parser().parse_args([])
    assert args.host == "127.0.0.1" and args.port == 30000 and args.api_key is None
    assert engine_options(args) == {}


def test_engine_options_pass_through():
    args = build_parser().parse_args(["--max-running-requests", "8", "--disable-radix-cache",
                                      "--disable-jump-forward", "--schedule-policy", "fcfs", "--max-context", "256"])
    assert engine_options(args) == {"max_running_requests": 8, "disable_radix_cache": True,
                                    "enable_jump_forward": False, "schedule_policy": "fcfs", "max_context": 256}
    args = build_parser().parse_args(["--speculative-algorithm", "ngram", "--speculative-num-draft-tokens", "4"])
    assert engine_options(args) == {"speculative_algorithm": "ngram", "speculative_num_draft_tokens": 4}
    assert engine_options(build_parser().parse_args(["--disable-batch-invariance"])) == {"batch_invariant": False}


def test_lora_options(tmp_path):
    args = build_parser().parse_args(["--lora-paths", "risk=/a/risk", "service=/b", "--max-loras-per-batch", "4"])
    assert engine_options(args) == {"lora_paths": ["risk=/a/risk", "service=/b"], "max_loras_per_batch": 4}


def test_missing_lora_adapter_fails_before_loading(capsys, tmp_path):
    assert main(["--model", str(tmp_path / "never-loaded.gguf"), "--lora-paths", f"risk={tmp_path / 'gone'}"]) == 2
    err = capsys.readouterr().err
    assert "gone" in err and "does not exist" in err


def test_bad_engine_option_fails_before_loading(capsys):
    assert main(["--tiny", "--schedule-policy", "random"]) == 2
    assert "schedule_policy" in capsys.readouterr().err


def test_loopback_only_helpers():
    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("localhost")
    assert not _is_loopback("0.0.0.0")
    with pytest.raises(ValueError):
        ServerThread(app=None, host="0.0.0.0")
