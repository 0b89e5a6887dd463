"""Native SGLang-style endpoints: `POST /generate` (what the language's `RuntimeEndpoint` speaks), model info.

`/generate` takes `Engine.generate`'s arguments. Without `stream` it returns the engine's result dict (a list
for a batch). With `stream` it sends server-sent events, one engine chunk each, ending with `data: [DONE]`;
like the engine's own stream, `text`, `output_ids`, `meta_info.output_token_logprobs` and
`meta_info.output_top_logprobs` are increments, while counts and `finish_reason` are totals so far. Batch
streams tag each chunk with `index`."""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from .engine_client import GenerateCall, RequestStream, EngineClient, collect
from .errors import APIError, bad_request
from .model_info import ModelInfo
from .protocol import GenerateRequest
from .sse import IDLE, SSE_KEEPALIVE, SSEResponse, dumps, merge_deltas, sse_body, sse_event

LONG_TEXT_CHARS = 4096
_STREAM_TOTALS_SKIP = ("output_token_logprobs", "output_top_logprobs", "input_token_logprobs", "input_top_logprobs")


def _per_item(value: Any, n: int, name: str, batch: bool) -> list:
    if batch and isinstance(value, list) and (name != "sampling_params" or all(isinstance(v, dict) for v in value)):
        if len(value) != n:
            raise bad_request(f"'{name}' has {len(value)} entries but the batch has {n} prompts", param=name)
        return value
    if isinstance(value, list) and not batch:
        raise bad_request(f"'{name}' is a list but the request has one prompt", param=name)
    return [value] * n


def generate_calls(req: GenerateRequest, vocab_size: int) -> tuple[list[GenerateCall], bool]:
    """(calls, is_batch). Raises APIError(400) on a malformed body."""
    if (req.text is None) == (req.input_ids is None):
        raise bad_request("give exactly one of 'text' and 'input_ids'", param="text")
    if req.text is not None:
        batch = isinstance(req.text, list)
        prompts: list = req.text if batch else [req.text]
    else:
        batch = bool(req.input_ids) and isinstance(req.input_ids[0], list)
        prompts = req.input_ids if batch else [req.input_ids]
        for ids in prompts:
            bad = [t for t in ids if not 0 <= t < vocab_size]
            if not ids or bad:
                raise bad_request(f"'input_ids' must be non-empty token ids in [0, {vocab_size}), got {bad[:5] or ids}",
                                  param="input_ids")
    if not prompts:
        raise bad_request("the batch is empty", param="text" if req.text is not None else "input_ids")
    n = len(prompts)
    params = _per_item(req.sampling_params or {}, n, "sampling_params", batch)
    lps = _per_item(req.return_logprob, n, "return_logprob", batch)
    starts = _per_item(req.logprob_start_len, n, "logprob_start_len", batch)
    tops = _per_item(req.top_logprobs_num, n, "top_logprobs_num", batch)
    calls = []
    for i, prompt in enumerate(prompts):
        text_kw = {"text": prompt} if req.text is not None else {"input_ids": list(prompt)}
        p = dict(params[i] or {})
        samples = p.pop("n", 1)
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise bad_request(f"sampling_params['n'] must be an int >= 1, got {samples!r}", param="n")
        batch = batch or samples > 1  # n samples come back as a list, prompt-major
        for j in range(samples):  # one engine request each; seed + j keeps them distinct and reproducible
            pj = {**p, "seed": p["seed"] + j} if p.get("seed") is not None and j else p
            calls.append(GenerateCall(sampling_params=pj, return_logprob=bool(lps[i]),
                                      logprob_start_len=starts[i], top_logprobs_num=int(tops[i] or 0),
                                      engine_stream=req.stream or not lps[i], prompt_param=next(iter(text_kw)),
                                      **text_kw))
    return calls, batch


class NativeServing:
    def __init__(self, client: EngineClient, info: ModelInfo):
        self.client = client
        self.info = info

    async def generate(self, req: GenerateRequest, request: Request) -> Response:
        calls, batch = generate_calls(req, self.info.vocab_size)
        # long texts are tokenized off the event loop (the engine would do it on the loop, inside submission)
        encode = self.info.tokenizer.encode
        calls = [dataclasses.replace(c, text=None, input_ids=await asyncio.to_thread(encode, c.text))
                 if c.text is not None and len(c.text) > LONG_TEXT_CHARS else c for c in calls]
        try:
            streams = await self.client.start_all(calls)
        except APIError as e:
            if e.param in ("max_tokens", "min_tokens"):  # native callers use the engine's own names
                e.param = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}[e.param]
            raise
        if req.stream:
            return SSEResponse(sse_body(self._events(streams, batch), streams))
        await collect(streams, request)
        results = [s.acc.result() for s in streams]
        return Response(dumps(results if batch else results[0]), media_type="application/json")

    async def _events(self, streams: list[RequestStream], batch: bool) -> AsyncIterator[bytes]:
        sent_input: set[int] = set()  # prompt logprobs go out once per request, with its first chunk
        async for i, d in merge_deltas(streams):
            if i == IDLE:
                yield SSE_KEEPALIVE
            if i == IDLE or d is None:
                continue
            meta = {k: v for k, v in streams[i].acc.meta_info.items() if k not in _STREAM_TOTALS_SKIP}
            if streams[i].call.return_logprob:
                meta["output_token_logprobs"] = d.token_logprobs
                meta["output_top_logprobs"] = d.top_logprobs
                if "input_token_logprobs" in streams[i].acc.meta_info and i not in sent_input:
                    sent_input.add(i)
                    meta["input_token_logprobs"] = streams[i].acc.meta_info["input_token_logprobs"]
                    meta["input_top_logprobs"] = streams[i].acc.meta_info.get("input_top_logprobs")
            chunk = {"text": d.text, "output_ids": d.token_ids, "meta_info": meta}
            if batch:
                chunk["index"] = i
            yield sse_event(chunk)

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.info.path or self.info.name, "tokenizer_path": self.info.tokenizer_path or "default",
                "served_model_name": self.info.name, "is_generation": True, "max_context": self.info.max_context,
                "context_length": self.info.max_context, "vocab_size": self.info.vocab_size}
