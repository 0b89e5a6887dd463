"""SGLang's native request, as its server (0.5) takes it: every field of SGLang's `GenerateReqInput` and every
key of its `SamplingParams` is carried out, accepted because it changes nothing on a one-process text-only
server, or refused with a 400 naming it. A field SGLang does not know is refused too (`unknown_parameter`), so
a typo never falls back to a default in silence.

    params, native = sampling_params(body.sampling_params, vocab_size, max_context)   # protocol + server-only
    check_request_fields(body.model_extra)                                              # the rest of the body
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglite.protocol import CONSTRAINT_KINDS, RequestError, SamplingParams

# --- GenerateReqInput ---------------------------------------------------------------------------------------------
# GenerateBody implements text, input_ids, sampling_params, return_logprob, logprob_start_len, top_logprobs_num,
# return_text_in_logprobs, return_prompt_token_ids, stream and rid. The others:

# routing, logging and tracing hints of SGLang's multi-process deployment: one engine here, so any value is
# carried out by doing nothing different
NO_EFFECT = frozenset({
    "session_id", "log_metrics", "routing_key", "conversation_id", "http_worker_ipc", "priority", "no_logs",
    "custom_labels", "external_trace_header", "received_time", "kv_hints", "disagg_prefill_dp_rank",
})
# one data-parallel rank: 0 (or unset) is what happens anyway
SINGLE_RANK = frozenset({"routed_dp_rank", "data_parallel_rank"})

# refused unless unset (None, False, 0, "", [] or {}): what each one would need
UNSUPPORTED = {
    **dict.fromkeys(("image_data", "video_data", "audio_data", "modalities", "mm_hashes", "mm_content_hashes",
                     "use_audio_in_video", "video_config", "images_config", "mm_processor_kwargs",
                     "max_dynamic_patch", "min_dynamic_patch", "image_max_dynamic_patch", "video_max_dynamic_patch",
                     "need_wait_for_mm_inputs", "num_items_assigned", "encoder_urls"),
                    "multimodal inputs need a multimodal model; sglite serves text-only models"),
    "input_embeds": "the engine takes token ids or text, not embeddings",
    "positional_embed_overrides": "the engine takes token ids or text, not embeddings",
    "lora_id": "name the adapter with lora_path (sglite keys adapters by name)",
    "custom_logit_processor": "sglite runs no user code in the engine",
    "token_ids_logprob": "the engine reports top-k logprobs (top_logprobs_num), not those of chosen token ids",
    **dict.fromkeys(("return_hidden_states", "return_routed_experts", "routed_experts_start_len",
                     "return_indexer_topk", "return_entropy", "return_sampling_mask", "sampling_logprobs_mode",
                     "return_bytes"), "the engine does not expose these internals"),
    **dict.fromkeys(("return_flat_raw_top_logprobs", "return_flat_raw_output_top_logprobs",
                     "return_flat_raw_top_logprobs_b64"), "logprobs come as [logprob, token_id, text] lists only"),
    **dict.fromkeys(("bootstrap_host", "bootstrap_port", "bootstrap_room", "bootstrap_pair_key", "decode_tp_size"),
                    "sglite has no prefill/decode disaggregation"),
    "session_params": "sglite has no sessions; send the whole prompt (the prefix cache reuses its KV)",
    **dict.fromkeys(("cache_salt", "extra_key"),
                    "the prefix cache has no namespaces: every request may reuse every cached prefix"),
    **dict.fromkeys(("multi_item_delimiter_indices", "token_indices_to_pool"), "sglite has no scoring API"),
    "background": "sglite has no background responses",
    **dict.fromkeys(("require_reasoning", "max_thinking_tokens"), "sglite has no reasoning controls"),
    "watermark": "sglite does not watermark outputs",
}


def _unset(value: Any) -> bool:
    return value is None or value is False or value == 0 or value in ("", [], {})


def check_request_fields(extra: dict[str, Any] | None) -> None:
    """Raises RequestError for a field of the body that is unknown, or set and not supported (naming it)."""
    for name, value in (extra or {}).items():
        if name in NO_EFFECT:
            continue
        if name in SINGLE_RANK:
            if value not in (None, 0):
                raise RequestError(name, "invalid_value", f"{name}={value!r}: this server has one data-parallel "
                                   "rank, 0")
            continue
        why = UNSUPPORTED.get(name)
        if why is None:
            raise RequestError(name, "unknown_param", f"unrecognized request argument supplied: {name}")
        if not _unset(value):
            raise RequestError(name, "unsupported", f"'{name}' is not supported: {why}")


# --- SamplingParams -------------------------------------------------------------------------------------------
GREEDY_BELOW = 1e-6   # SGLang samples greedily below this temperature


@dataclass(frozen=True)
class ServerSampling:
    """SGLang sampling keys the server carries out itself (they are not the engine's)."""
    stream_interval: int = 1   # a streamed chunk every this many output tokens (and at the end)


def sampling_params(d: dict[str, Any] | None, vocab_size: int, max_context: int
                    ) -> tuple[SamplingParams, ServerSampling]:
    """SGLang's sampling_params dict -> (protocol SamplingParams, the server's part). None means the default, as
    in SGLang; `max_new_tokens: null` means "up to the context", which the engine clamps to. Raises
    RequestError naming the key."""
    if d is None:
        return SamplingParams(), ServerSampling()
    if not isinstance(d, dict):
        raise RequestError("sampling_params", "invalid_type", f"sampling_params must be a dict, got {d!r}")
    d = dict(d)
    if "max_new_tokens" in d and d["max_new_tokens"] is None:
        d["max_new_tokens"] = max_context
    d = {k: v for k, v in d.items() if v is not None}
    # HF's fast tokenizers (SGLang's) ignore it when decoding, and so does ours: both decode token bytes
    if not isinstance(d.pop("spaces_between_special_tokens", True), bool):
        raise RequestError("spaces_between_special_tokens", "invalid_type",
                           "sampling_params['spaces_between_special_tokens'] must be a bool")
    d.pop("custom_params", None)   # read only by a custom_logit_processor, which is refused
    interval = d.pop("stream_interval", 1)
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        raise RequestError("stream_interval", "invalid_value", f"stream_interval must be an int >= 1, got "
                           f"{interval!r}")
    if "sampling_seed" in d:
        seed = d.pop("sampling_seed")
        if d.setdefault("seed", seed) != seed:
            raise RequestError("sampling_seed", "invalid_value", "set one of sampling_seed and seed")
    beam = d.pop("beam_width", 1)
    if beam != 1:
        raise RequestError("beam_width", "unsupported", f"beam search (beam_width={beam!r}) is not supported")
    if not _unset(d.pop("watermark", None)):
        raise RequestError("watermark", "unsupported", "sampling_params['watermark'] is not supported")
    for key in CONSTRAINT_KINDS:   # SGLang: an empty constraint is no constraint
        if d.get(key) == "":
            del d[key]
    t = d.get("temperature")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < GREEDY_BELOW:
        d["temperature"] = 0.0
    params = SamplingParams.from_dict(d)
    params.check_vocab(vocab_size)
    return params, ServerSampling(interval)

