"""Native SGLang endpoints: `POST /generate` (what SGLang's and sglite's `RuntimeEndpoint` speak), model info.

`/generate` takes SGLang's request body (see sglang_compat.py for how each of its fields is honoured). Without
`stream` it returns the result dict (a list for a batch or n > 1). With `stream` it sends server-sent events in
SGLang's format: each event holds the sample's result so far, so `text`, `output_ids` and the
`meta_info` logprob lists are cumulative, and the last event equals the non-streamed result; the stream ends
with `data: [DONE]`. Events of a batch carry `index`. `stream_interval: k` sends an event every k tokens.
Logprob entries are `[logprob, token_id, text]`, the text null unless `return_text_in_logprobs`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from sglite.protocol import GenerateRequest, RequestError, SamplingParams, StreamChunk, chunk_to_dict

from .bodies import GenerateBody
from .engine_client import EngineClient, RequestStream, collect
from .api_errors import APIError, bad_request, from_request_error
from .limits import MAX_N, MAX_TOP_LOGPROBS
from .model_info import ModelInfo
from .sglang_compat import ServerSampling, check_request_fields, sampling_params
from .sse import IDLE, SSE_KEEPALIVE, SSEResponse, dumps, merge_chunks, sse_body, sse_event

LOGPROB_KEYS = ("input_token_logprobs", "input_top_logprobs", "output_token_logprobs", "output_top_logprobs")
# lists a stream's events carry cumulatively; the constrained logprobs keep their texts (they place the values)
CUMULATIVE_KEYS = (*LOGPROB_KEYS, "output_token_constrained_logprobs")


def _per_item(value: Any, n: int, name: str, batch: bool) -> list:
    if batch and isinstance(value, list) and (name != "sampling_params" or all(isinstance(v, dict) for v in value)):
        if len(value) != n:
            raise bad_request(f"'{name}' has {len(value)} entries but the batch has {n} prompts", param=name)
        return value
    if isinstance(value, list) and not batch:
        raise bad_request(f"'{name}' is a list but the request has one prompt", param=name)
    return [value] * n


@dataclass(frozen=True)
class NativeRequest:
    """One prompt of a /generate body: the engine request plus what the server itself does with the result."""
    request: GenerateRequest
    server: ServerSampling
    text_in_logprobs: bool
    prompt_ids: list[int] | None   # reported back when return_prompt_token_ids


def _rids(rid: Any, n: int, batch: bool) -> list[str | None]:
    """SGLang: one id per prompt; a single string names a batch's items rid-0, rid-1, ..."""
    if rid is None:
        return [None] * n
    if isinstance(rid, list):
        if not batch or len(rid) != n:
            raise bad_request(f"'rid' has {len(rid)} ids for {n} prompts", param="rid")
        return rid
    return [rid] if not batch else [f"{rid}-{i}" for i in range(n)]


def _check_limits(p: SamplingParams, top_logprobs_num: int, max_context: int) -> None:
    """The limits the OpenAI routes hold too (limits.py); max_new_tokens past the whole context cannot be met."""
    if p.n > MAX_N:
        raise bad_request(f"'n' must be between 1 and {MAX_N}, got {p.n}", param="n")
    if not 0 <= top_logprobs_num <= MAX_TOP_LOGPROBS:
        raise bad_request(f"'top_logprobs_num' must be between 0 and {MAX_TOP_LOGPROBS}, got {top_logprobs_num}",
                          param="top_logprobs_num")
    if p.max_new_tokens > max_context:
        raise APIError(400, f"'max_new_tokens' is {p.max_new_tokens} but the model's context length is {max_context}; "
                       "lower it (null means up to the context)", param="max_new_tokens",
                       code="context_length_exceeded")


def generate_requests(body: GenerateBody, info: ModelInfo) -> tuple[list[NativeRequest], bool]:
    """(requests, is_batch). Raises APIError(400) on a malformed body, RequestError on a bad value."""
    check_request_fields(body.model_extra)
    if (body.text is None) == (body.input_ids is None):
        raise bad_request("give exactly one of 'text' and 'input_ids'", param="text")
    vocab_size = info.vocab_size
    if body.text is not None:
        batch = isinstance(body.text, list)
        prompts: list = body.text if batch else [body.text]
    else:
        batch = bool(body.input_ids) and isinstance(body.input_ids[0], list)
        prompts = body.input_ids if batch else [body.input_ids]
        for ids in prompts:
            bad = [t for t in ids if not 0 <= t < vocab_size]
            if not ids or bad:
                raise bad_request(f"'input_ids' must be non-empty token ids in [0, {vocab_size}), got {bad[:5] or ids}",
                                  param="input_ids")
    if not prompts:
        raise bad_request("the batch is empty", param="text" if body.text is not None else "input_ids")
    n = len(prompts)
    params = _per_item(body.sampling_params or {}, n, "sampling_params", batch)
    if body.sources is not None:
        from sglite.grounding import with_sources
        texts = _per_item(body.sources, n, "sources", batch)
        params = [{**(p or {}), "json_schema": with_sources((p or {}).get("json_schema"), t)}
                  for p, t in zip(params, texts)]
    lps = _per_item(body.return_logprob, n, "return_logprob", batch)
    starts = _per_item(body.logprob_start_len, n, "logprob_start_len", batch)
    tops = _per_item(body.top_logprobs_num, n, "top_logprobs_num", batch)
    clps = _per_item(body.return_constrained_logprob, n, "return_constrained_logprob", batch)
    rids = _rids(body.rid, n, batch)
    loras = _per_item(body.lora_path, n, "lora_path", batch)
    out: list[NativeRequest] = []
    for i, prompt in enumerate(prompts):
        p, server = sampling_params(params[i], vocab_size, info.max_context)
        _check_limits(p, tops[i] or 0, info.max_context)
        batch = batch or p.n > 1   # n samples come back as a list, prompt-major
        if body.text is not None and body.return_prompt_token_ids:
            prompt = info.tokenizer.encode(prompt)   # tokenized here so the ids reported are the ones used
            prompt_kw: dict[str, Any] = {"input_ids": prompt}
        else:
            prompt_kw = {"text": prompt} if body.text is not None else {"input_ids": prompt}
        if rids[i] is not None:
            prompt_kw["rid"] = rids[i]
        request = GenerateRequest(params=p, stream=bool(body.stream), return_logprob=bool(lps[i]),
                                  logprob_start_len=starts[i], top_logprobs_num=tops[i] or 0,
                                  lora_path=loras[i], return_constrained_logprob=bool(clps[i]), **prompt_kw)
        out.append(NativeRequest(request, server, body.return_text_in_logprobs,
                                 list(prompt) if body.return_prompt_token_ids else None))
    return out, batch


def _without_text(entries: list) -> list:
    """(logprob, id, text) -> (logprob, id, None), in a list of entries or of lists of them (top logprobs)."""
    out = []
    for e in entries:
        if isinstance(e, (tuple, list)) and e and not isinstance(e[0], (tuple, list)):
            out.append((e[0], e[1], None))
        else:
            out.append(_without_text(e) if isinstance(e, (tuple, list)) else e)
    return out


def shape_result(d: dict[str, Any], req: NativeRequest) -> dict[str, Any]:
    """An engine result dict in SGLang's shape for `req`'s options."""
    if not req.text_in_logprobs:
        meta = d["meta_info"]
        for key in LOGPROB_KEYS:
            if key in meta:
                meta[key] = _without_text(list(meta[key]))
    if req.prompt_ids is not None:
        d["prompt_token_ids"] = req.prompt_ids
    return d


class _Accumulator:
    """One sample's result so far, for SGLang's cumulative stream events."""

    def __init__(self) -> None:
        self.text = ""
        self.ids: list[int] = []
        self.logprobs: dict[str, list] = {k: [] for k in CUMULATIVE_KEYS}
        self.sent_tokens = 0

    def add(self, chunk: StreamChunk, with_logprobs: bool) -> dict[str, Any]:
        d = chunk_to_dict(chunk, with_logprobs)
        self.text += d["text"]
        self.ids += d["output_ids"]
        meta = d["meta_info"]
        for key in CUMULATIVE_KEYS:
            if key in meta:
                self.logprobs[key] += meta[key]
                meta[key] = list(self.logprobs[key])
        return {"text": self.text, "output_ids": list(self.ids), "meta_info": meta}


class NativeServing:
    def __init__(self, client: EngineClient, info: ModelInfo):
        self.client = client
        self.info = info

    async def generate(self, body: GenerateBody, request: Request) -> Response:
        # the engine names a bad prompt 'prompt' or 'input_ids'; this API calls the text field 'text'
        names = {"prompt": "text", "input_ids": "text"} if body.text is not None else {"prompt": "input_ids"}
        try:
            reqs, batch = generate_requests(body, self.info)
            streams = await self.client.start([r.request for r in reqs], request)
        except RequestError as e:
            raise from_request_error(e, names) from None
        per_sample = [r for r in reqs for _ in range(r.request.params.n)]   # streams are request-major
        if body.stream:
            return SSEResponse(sse_body(self._events(streams, per_sample, batch), streams))
        results = [shape_result(s.output.to_dict(), r) for s, r in zip(await collect(streams, request), per_sample)]
        return Response(dumps(results if batch else results[0]), media_type="application/json")

    async def _events(self, streams: list[RequestStream], reqs: list[NativeRequest], batch: bool
                      ) -> AsyncIterator[bytes]:
        acc = [_Accumulator() for _ in streams]
        async for i, c in merge_chunks(streams):
            if i == IDLE:
                yield SSE_KEEPALIVE
            elif c is not None:
                a, r = acc[i], reqs[i]
                event = shape_result(a.add(c, r.request.return_logprob), r)
                due = c.completion_tokens - a.sent_tokens >= r.server.stream_interval
                if c.finished or due:
                    a.sent_tokens = c.completion_tokens
                    yield sse_event({**event, "index": i} if batch else event)

    def abort(self, rid: str) -> None:
        self.client.engine.abort(rid)

    def model_info(self) -> dict[str, Any]:
        """SGLang's /model_info fields. `model_path` is what SGLang's frontend matches its chat templates
        against (see ModelInfo.sglang_model_path); `chat_template` names that template for clients that pass it
        (`RuntimeEndpoint(url, chat_template_name=...)`); `model_file` is the file or folder served."""
        info = self.info
        return {"model_path": info.sglang_model_path, "model_file": info.path, "chat_template": info.sglang_template,
                "tokenizer_path": info.tokenizer_path or "default", "served_model_name": info.name,
                "is_generation": True, "max_context": info.max_context, "context_length": info.max_context,
                "vocab_size": info.vocab_size, "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False}
