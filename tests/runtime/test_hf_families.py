"""Hugging Face folders of every supported family and config style, written by transformers, load in sglite with
the same logits and greedy tokens as transformers' own forward, directly and through the engine (paged attention,
prefix cache, chunked prefill). Checkpoints are tiny and random (see hf_checkpoints.py); nothing is downloaded."""
from __future__ import annotations

import dataclasses
import logging

import pytest

from sglite.runtime.model import LlamaModel, Model, load_model
from sglite.runtime.weights import load_config_and_weights

from .hf_checkpoints import (FAMILIES, PROMPT, VARIANTS, WINDOW, load_reference, reference_greedy,
                             reference_logits, write_checkpoint)
from .paged import PagedRunner

GREEDY_TOKENS = 16


@dataclasses.dataclass
class Loaded:
    folder: object
    ours: Model
    ref: object                  # transformers' model of the same folder
    prompt: list[int]
    ref_greedy: list[int]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer):
    """name -> Loaded, each built once per module on first use."""
    built: dict[str, Loaded] = {}

    def get(name: str) -> Loaded:
        if name not in built:
            variant = next(v for v in VARIANTS if v.name == name)
            folder = write_checkpoint(tmp_path_factory.mktemp(name), variant, tokenizer)
            ref = load_reference(folder)
            prompt = tokenizer.encode(PROMPT)
            built[name] = Loaded(folder, load_model(folder), ref, prompt,
                                 reference_greedy(ref, prompt, GREEDY_TOKENS))
        return built[name]
    return get


@pytest.fixture(params=[v.name for v in VARIANTS])
def loaded(request, checkpoints) -> Loaded:
    return checkpoints(request.param)


def test_logits_match_transformers(loaded):
    ours, ref = loaded.ours.logits(loaded.prompt), reference_logits(loaded.ref, loaded.prompt)
    assert (ours - ref).abs().max().item() < 1e-4


def test_greedy_matches_transformers(loaded):
    """Prefill, then one token per step through the paged pool (slots scrambled)."""
    assert PagedRunner(loaded.ours).greedy(loaded.prompt, GREEDY_TOKENS) == loaded.ref_greedy


def test_engine_with_prefix_cache_and_chunked_prefill_matches_transformers(loaded):
    """Prompt chunks of 16 through the paged pool; a second prompt sharing the first's prefix hits the cache."""
    from sglite.runtime.engine import Engine

    engine = Engine(loaded.ours, max_total_tokens=512, max_running_requests=4, chunked_prefill_size=16,
                    background=False)
    engine.core.debug_checks = True
    try:
        first = engine.generate(input_ids=loaded.prompt, sampling_params={"temperature": 0, "max_new_tokens": 6})
        assert first["output_ids"] == loaded.ref_greedy[:6]
        longer = loaded.prompt + [1234, 5678]
        second = engine.generate(input_ids=longer, sampling_params={"temperature": 0, "max_new_tokens": 3})
        assert second["meta_info"]["cached_tokens"] >= len(loaded.prompt) - 16
        assert second["output_ids"] == reference_greedy(loaded.ref, longer, 3)
    finally:
        engine.shutdown()


ROPE_VARIANTS = ["llama-legacy-theta", "llama-rope_parameters", "llama-linear-legacy", "llama-llama3",
                 "llama-yarn-mscale-legacy", "qwen3-bias-yarn", "phi3-partial", "phi3-longrope"]


@pytest.mark.parametrize("name", ROPE_VARIANTS)
def test_rope_settings_change_the_output(checkpoints, name):
    """The settings these variants test are not no-ops on this prompt: dropping them moves logits by > 1e-3
    (so agreement above is evidence they are honoured; this is the issue's silent fallback, made visible)."""
    loaded = checkpoints(name)
    config, weights = load_config_and_weights(loaded.folder)
    plain = dataclasses.replace(config, rope_theta=10000.0, rope_scaling=None, partial_rotary_dim=None)
    ablated = Model(LlamaModel(plain, weights), loaded.ours.tokenizer)
    assert (ablated.logits(loaded.prompt) - loaded.ours.logits(loaded.prompt)).abs().max().item() > 1e-3


def test_families_covered():
    assert len(FAMILIES) >= 6, FAMILIES


WINDOWED_VARIANTS = ["mistral-sliding", "qwen2-sliding-tied", "gemma2-softcap", "gemma3", "gemma3-legacy"]


@pytest.mark.parametrize("name", WINDOWED_VARIANTS)
def test_sliding_window_masks(checkpoints, name):
    """The prompt is longer than the window, the context is not capped at it, and the mask is not a no-op:
    attending to the whole prompt instead moves logits by > 1e-3 (agreement above is evidence it is honoured)."""
    loaded = checkpoints(name)
    config = loaded.ours.config
    assert config.sliding_window == WINDOW < len(loaded.prompt) < config.max_context
    _, weights = load_config_and_weights(loaded.folder)
    unwindowed = Model(LlamaModel(dataclasses.replace(config, sliding_window=None, sliding_layers=None), weights),
                       loaded.ours.tokenizer)
    assert (unwindowed.logits(loaded.prompt) - loaded.ours.logits(loaded.prompt)).abs().max().item() > 1e-3


@pytest.mark.parametrize("name, changes", [
    ("gemma3", dict(rope_local_theta=None)),                      # the windowed layers' own rope base
    ("gemma3-legacy", dict(rope_local_theta=None)),
    ("gemma3-legacy", dict(final_logit_softcapping=None)),
    ("gemma2-attn-softcap", dict(attn_logit_softcapping=None)),
])
def test_gemma_settings_change_the_output(checkpoints, name, changes):
    loaded = checkpoints(name)
    config, weights = load_config_and_weights(loaded.folder)
    ablated = Model(LlamaModel(dataclasses.replace(config, **changes), weights), loaded.ours.tokenizer)
    assert (ablated.logits(loaded.prompt) - loaded.ours.logits(loaded.prompt)).abs().max().item() > 1e-3


def test_model_card_is_logged(tmp_path, tokenizer, caplog):
    variant = next(v for v in VARIANTS if v.name == "phi3-partial")
    folder = write_checkpoint(tmp_path, variant, tokenizer)
    with caplog.at_level(logging.INFO, logger="sglite.runtime"):
        load_model(folder)
    lines = [r.getMessage() for r in caplog.records if r.name == "sglite.runtime"]
    assert len(lines) == 1
    card = lines[0]
    for part in ("phi3", "M parameters", "float32", "context 512", "theta=10000", "partial rotary 8/16",
                 "chat template from chat_template.jinja"):
        assert part in card, (part, card)


def test_logits_tolerance_is_meaningful(loaded):
    """Sanity: the reference is not trivially flat (a wrong model would not pass 1e-4 by accident)."""
    assert reference_logits(loaded.ref, loaded.prompt).std().item() > 0.1
