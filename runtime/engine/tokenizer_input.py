"""Validation of Engine.generate's inputs: prompts / input_ids and sampling params -> per-request specs.
Everything here raises ValueError naming the argument before anything is queued."""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

from .sampling_params import SamplingParams


class RequestSpec(NamedTuple):
    input_ids: list[int]
    params: SamplingParams


def normalize_inputs(tokenizer, prompt: Any, input_ids: Any, sampling_params: Any, *, vocab_size: int,
                     max_context: int, pool_tokens: int) -> tuple[list[RequestSpec], bool]:
    """Returns (one spec per prompt, whether the caller passed a single prompt)."""
    if (prompt is None) == (input_ids is None):
        raise ValueError("generate() takes exactly one of prompt= or input_ids=")
    if prompt is not None:
        single = isinstance(prompt, str)
        prompts = [prompt] if single else prompt
        if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
            raise ValueError("prompt must be a str or a list of str")
        id_lists = [tokenizer.encode(p) for p in prompts]
    else:
        if not isinstance(input_ids, (list, tuple)) or not input_ids:
            raise ValueError("input_ids must be a non-empty list of ints or a list of such lists")
        single = not isinstance(input_ids[0], (list, tuple))
        id_lists = [list(input_ids)] if single else [list(x) for x in input_ids]
    if not id_lists:
        raise ValueError("generate() got an empty batch of prompts")

    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != len(id_lists):
            raise ValueError(f"sampling_params is a list of {len(sampling_params)} but there are "
                             f"{len(id_lists)} prompts")
        params = [SamplingParams.from_dict(p) for p in sampling_params]
    else:
        params = [SamplingParams.from_dict(sampling_params)] * len(id_lists)

    specs = []
    for i, (ids, p) in enumerate(zip(id_lists, params)):
        specs.append(RequestSpec(_check_ids(ids, i, vocab_size, max_context),
                                 _fit_params(p, len(ids), i, max_context, pool_tokens)))
    return specs, single


def _check_ids(ids: Sequence[Any], i: int, vocab_size: int, max_context: int) -> list[int]:
    if not ids:
        raise ValueError(f"prompt {i} is empty: give at least one token")
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in ids):
        raise ValueError(f"input_ids of prompt {i} must be ints in [0, {vocab_size})")
    if len(ids) >= max_context:
        raise ValueError(f"prompt {i} has {len(ids)} tokens; the context holds {max_context} (prompt plus output), "
                         "so shorten the prompt")
    return list(ids)


def _fit_params(p: SamplingParams, prompt_len: int, i: int, max_context: int, pool_tokens: int) -> SamplingParams:
    """Clamps max_new_tokens to the context; rejects a request the KV pool could never hold."""
    room = max_context - prompt_len
    if p.max_new_tokens > room:
        p = dataclasses.replace(p, max_new_tokens=room, min_new_tokens=min(p.min_new_tokens, room))
    if prompt_len + p.max_new_tokens > pool_tokens:
        raise ValueError(f"prompt {i} ({prompt_len} tokens) plus max_new_tokens ({p.max_new_tokens}) exceeds the "
                         f"KV pool ({pool_tokens} tokens); lower max_new_tokens or raise max_total_tokens")
    return p
