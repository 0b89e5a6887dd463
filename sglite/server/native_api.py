"""Native SGLang-style endpoints: `POST /generate` (what the language's `RuntimeEndpoint` speaks), model info.

`/generate` takes `Engine.generate`'s arguments. Without `stream` it returns the engine's result dict (a list
for a batch). With `stream` it sends server-sent events, one engine chunk each, ending with `data: [DONE]`;
as in `protocol.chunk_to_dict`, `text`, `output_ids`, `meta_info.output_token_logprobs` and
`meta_info.output_top_logprobs` are increments, counts and `finish_reason` are totals so far, and the prompt's
logprobs come in the first chunk. Batch streams tag each chunk with `index`."""
from __future__ import annotations

from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from sglite.protocol import GenerateRequest, RequestError, SamplingParams, chunk_to_dict

from .bodies import GenerateBody
from .engine_client import EngineClient, RequestStream, collect
from .errors import bad_request, from_request_error
from .model_info import ModelInfo
from .sse import IDLE, SSE_KEEPALIVE, SSEResponse, dumps, merge_chunks, sse_body, sse_event


def _per_item(value: Any, n: int, name: str, batch: bool) -> list:
    if batch and isinstance(value, list) and (name != "sampling_params" or all(isinstance(v, dict) for v in value)):
        if len(value) != n:
            raise bad_request(f"'{name}' has {len(value)} entries but the batch has {n} prompts", param=name)
        return value
    if isinstance(value, list) and not batch:
        raise bad_request(f"'{name}' is a list but the request has one prompt", param=name)
    return [value] * n


def generate_requests(body: GenerateBody, vocab_size: int) -> tuple[list[GenerateRequest], bool]:
    """(requests, is_batch). Raises APIError(400) on a malformed body, RequestError on a bad value."""
    if (body.text is None) == (body.input_ids is None):
        raise bad_request("give exactly one of 'text' and 'input_ids'", param="text")
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
    lps = _per_item(body.return_logprob, n, "return_logprob", batch)
    starts = _per_item(body.logprob_start_len, n, "logprob_start_len", batch)
    tops = _per_item(body.top_logprobs_num, n, "top_logprobs_num", batch)
    requests: list[GenerateRequest] = []
    for i, prompt in enumerate(prompts):
        p = SamplingParams.from_dict(params[i])
        batch = batch or p.n > 1   # n samples come back as a list, prompt-major
        prompt_kw = {"text": prompt} if body.text is not None else {"input_ids": prompt}
        requests.append(GenerateRequest(params=p, stream=body.stream, return_logprob=lps[i],
                                        logprob_start_len=starts[i], top_logprobs_num=tops[i] or 0, **prompt_kw))
    return requests, batch


class NativeServing:
    def __init__(self, client: EngineClient, info: ModelInfo):
        self.client = client
        self.info = info

    async def generate(self, body: GenerateBody, request: Request) -> Response:
        # the engine names a bad prompt 'prompt' or 'input_ids'; this API calls the text field 'text'
        names = {"prompt": "text", "input_ids": "text"} if body.text is not None else {"prompt": "input_ids"}
        try:
            requests, batch = generate_requests(body, self.info.vocab_size)
            streams = await self.client.start(requests)
        except RequestError as e:
            raise from_request_error(e, names) from None
        if body.stream:
            return SSEResponse(sse_body(self._events(streams, batch), streams))
        results = [s.output.to_dict() for s in await collect(streams, request)]
        return Response(dumps(results if batch else results[0]), media_type="application/json")

    async def _events(self, streams: list[RequestStream], batch: bool) -> AsyncIterator[bytes]:
        async for i, c in merge_chunks(streams):
            if i == IDLE:
                yield SSE_KEEPALIVE
            elif c is not None:
                event = chunk_to_dict(c, with_logprobs=streams[i].request.return_logprob)
                yield sse_event({**event, "index": i} if batch else event)

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.info.path or self.info.name, "tokenizer_path": self.info.tokenizer_path or "default",
                "served_model_name": self.info.name, "is_generation": True, "max_context": self.info.max_context,
                "context_length": self.info.max_context, "vocab_size": self.info.vocab_size}
