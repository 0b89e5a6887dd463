"""OpenAI-compatible `/v1/chat/completions` and `/v1/completions`: request -> GenerateRequests -> response.

A prompt's `n` choices are the samples of one engine request (they share its prompt), streamed or not. With a
`seed`, choice i uses seed + i, so the choices differ but the response is reproducible."""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from sglite.protocol import CONSTRAINT_KINDS, FIELD_NAMES, GenerateRequest, RequestError, SamplingParams

from .bodies import ChatCompletionRequest, CompletionRequest
from .engine_client import EngineClient, RequestStream, collect
from .api_errors import OPENAI_PARAM_NAMES, APIError, bad_request, from_request_error
from .limits import MAX_N, MAX_TOP_LOGPROBS
from .model_info import ModelInfo
from .openai_format import LogprobFormatter, finish_reason, matched_stop, response_format_schema, usage
from .sse import IDLE, SSE_KEEPALIVE, SSEResponse, dumps, merge_chunks, sse_body, sse_event
from .tool_reply import ToolReplyText, split_reply
from .tools import ToolCallText, ToolPlan, render_tool_messages, tool_call_message, tool_plan

# SamplingParams fields a body carries under their own names (OpenAI renames the token counts; logit_bias is
# keyed by strings there)
_PASSTHROUGH = tuple(sorted(FIELD_NAMES - set(OPENAI_PARAM_NAMES) - {"logit_bias"}))


def lora_adapters(engine: Any) -> list[str]:
    """The names of the engine's loaded LoRA adapters (none for an engine without them)."""
    names = getattr(engine, "lora_adapters", None)
    return list(names()) if callable(names) else []


class OpenAIServing:
    def __init__(self, client: EngineClient, info: ModelInfo):
        self.client = client
        self.info = info
        self.logprobs = LogprobFormatter(info)

    # --- chat -------------------------------------------------------------------------------------------------
    async def chat(self, req: ChatCompletionRequest, request: Request) -> Response:
        lora = self._check_model(req.model)
        if req.top_logprobs is not None and not req.logprobs:
            raise bad_request("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        plan = tool_plan(req)
        if plan is not None:
            fixed = [k for k in ("response_format", *CONSTRAINT_KINDS) if getattr(req, k) is not None]
            if fixed and not (fixed == ["response_format"] and req.response_format.type == "text"):
                raise bad_request(f"'{fixed[0]}' cannot be combined with tools unless tool_choice is 'none'",
                                  param=fixed[0])
        prompt_ids = await self._encode(self._render_chat(req, plan), "messages")
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        if max_tokens is not None and max_tokens < 1:
            raise bad_request(f"'max_tokens' must be at least 1, got {max_tokens}", param=(
                "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"))
        names = self._names(req, "messages")
        try:
            params = self._sampling_params(req, len(prompt_ids), max_tokens, "messages")
            if plan is not None and plan.mode == "required":   # a call is never cut by a stop string
                params = params.replace(json_schema=plan.call_schema, stop=(), stop_regex=())
            elif plan is not None:
                params = params.replace(structural_tag=json.dumps(plan.structural_tag))
            lp = {"return_logprob": req.logprobs, "top_logprobs_num": req.top_logprobs or 0,
                  "logprob_start_len": len(prompt_ids) if req.logprobs else None}
            gen = GenerateRequest(params=params, stream=req.stream, input_ids=prompt_ids, lora_path=lora, **lp)
            streams: list[Any] = await self.client.start([gen], request)
        except RequestError as e:
            raise from_request_error(e, names) from None
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            events = self._chat_events(streams, rid, created, req.logprobs, include_usage, plan)
            return SSEResponse(sse_body(events, streams))
        choices = []
        for i, s in enumerate(await collect(streams, request)):
            content, calls = s.output.text, None
            if plan is not None and plan.mode == "required":
                calls = tool_call_message(content)
                content = None if calls is not None else content
            elif plan is not None:
                content, calls = split_reply(content)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice = {"index": i, "message": message, "logprobs": None,
                      "finish_reason": _tools_finish(plan, s, bool(calls)),
                      "matched_stop": matched_stop(s)}
            if req.logprobs:
                choice["logprobs"] = {"content": self.logprobs.chat(s.output.output_token_logprobs or (),
                                                                     s.output.output_top_logprobs or ())}
            choices.append(choice)
        return _json({"id": rid, "object": "chat.completion", "created": created, "model": self.info.name,
                      "choices": choices, "usage": usage(streams)})

    def _check_model(self, model: str | None) -> str | None:
        """The LoRA adapter `model` names (None: the base model, by its name or no name). An unknown name: 404."""
        if model is None or model == self.info.name:
            return None
        adapters = lora_adapters(self.client.engine)
        if model in adapters:
            return model
        served = ", ".join(repr(m) for m in [self.info.name, *adapters])
        raise APIError(404, f"the model {model!r} does not exist; this server serves {served}", param="model",
                       code="model_not_found")

    def _render_chat(self, req: ChatCompletionRequest, plan: ToolPlan | None) -> str:
        messages = []
        for i, m in enumerate(req.messages):
            content = m.content
            if isinstance(content, list):
                if any(p.type != "text" for p in content):
                    raise bad_request("only text content parts are supported", param=f"messages[{i}].content")
                content = "".join(p.text or "" for p in content)
            extra = {k: v for k, v in (m.model_extra or {}).items() if v is not None}
            role = "system" if m.role == "developer" else m.role
            messages.append({**extra, "role": role, "content": content or ""})
        if plan is not None or any(m.role == "tool" or "tool_calls" in m.model_extra for m in req.messages):
            template = getattr(self.info.tokenizer, "chat_template", None) or ""
            messages = render_tool_messages(messages, plan, tool_role="tool" in template)
        last_is_assistant = messages[-1]["role"] == "assistant"
        try:
            text = self.info.tokenizer.apply_chat_template(
                messages, add_generation_prompt=not (req.continue_final_message and last_is_assistant))
        except ValueError as e:
            raise bad_request(str(e), param="messages") from e
        except Exception as e:  # jinja2 TemplateError from the model's own template
            raise bad_request(f"the model's chat template rejected the messages: {e}", param="messages") from e
        if req.continue_final_message and last_is_assistant:
            text = text[:text.rindex(messages[-1]["content"]) + len(messages[-1]["content"])] \
                if messages[-1]["content"] else text
        return text

    async def _chat_events(self, streams: list[Any], rid: str, created: int, logprobs: bool, include_usage: bool,
                           plan: ToolPlan | None) -> AsyncIterator[bytes]:
        """Content deltas; with tools, `tool_calls` deltas too (ToolCallText under `required`, ToolReplyText's
        content and calls under `auto`). With tools the role comes with a choice's first delta (content null for
        a `required` call)."""
        def chunk(choices: list[dict], **extra: Any) -> bytes:
            return sse_event({"id": rid, "object": "chat.completion.chunk", "created": created,
                              "model": self.info.name, "choices": choices, **extra})

        def delta(i: int, d: dict[str, Any], lp: Any = None, finish: str | None = None, **extra: Any) -> bytes:
            if i not in greeted:
                greeted.add(i)
                d = {"role": "assistant", **d}
            return chunk([{"index": i, "delta": d, "logprobs": lp, "finish_reason": finish, **extra}])

        greeted: set[int] = set()
        readers: list[Any] = [None] * len(streams)   # per choice: its ToolCallText / ToolReplyText
        if plan is None:
            for i in range(len(streams)):
                yield delta(i, {"content": ""})
        else:
            readers = [ToolCallText() if plan.mode == "required" else ToolReplyText() for _ in streams]
        async for i, c in merge_chunks(streams):
            if i == IDLE:
                yield SSE_KEEPALIVE
                continue
            s, reader = streams[i], readers[i]
            if c is None:
                called = False
                if reader is not None:
                    tail = _reader_delta(reader, "", final=True, greeted=i in greeted)
                    if tail:
                        yield delta(i, tail)
                    called = reader.name is not None if isinstance(reader, ToolCallText) else reader.named > 0
                yield delta(i, {} if i in greeted else {"content": ""}, finish=_tools_finish(plan, s, called),
                            matched_stop=matched_stop(s))
            elif c.text_delta or (logprobs and c.new_token_logprobs):
                lp = {"content": self.logprobs.chat(c.new_token_logprobs, c.new_top_logprobs)} if logprobs else None
                if reader is not None:
                    d = _reader_delta(reader, c.text_delta, final=False, greeted=i in greeted)
                    if d or lp:
                        yield delta(i, d, lp)
                else:
                    yield delta(i, {"content": c.text_delta}, lp)
        if include_usage:
            yield chunk([], usage=usage(streams))

    # --- completions ------------------------------------------------------------------------------------------
    async def completions(self, req: CompletionRequest, request: Request) -> Response:
        lora = self._check_model(req.model)
        if req.max_tokens is not None and req.max_tokens < (0 if req.echo else 1):
            raise bad_request(f"'max_tokens' must be at least 1 (0 only with echo, to score the prompt), got "
                              f"{req.max_tokens}", param="max_tokens")
        if req.suffix:
            raise bad_request("'suffix' (insertion) is not supported", param="suffix")
        if req.best_of is not None and req.best_of != req.n:
            raise bad_request("'best_of' other than n is not supported", param="best_of")
        if req.logprobs is not None and not 0 <= req.logprobs <= 5:
            raise bad_request(f"'logprobs' must be between 0 and 5, got {req.logprobs}", param="logprobs")
        if req.echo and req.stream:
            raise bad_request("'echo' with 'stream' is not supported", param="echo")
        prompts = req.prompt
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not prompts:
            raise bad_request("'prompt' is empty", param="prompt")
        all_ids = [p if isinstance(p, list) else await self._encode(p, "prompt") for p in prompts]
        want_lp, echo = req.logprobs is not None, req.echo and req.logprobs is not None
        requests: list[GenerateRequest] = []
        try:
            for ids in all_ids:
                self._check_ids(ids)
                params = self._sampling_params(req, len(ids), req.max_tokens, "prompt", default_max_tokens=16)
                requests.append(GenerateRequest(params=params, stream=req.stream, input_ids=ids, lora_path=lora,
                                                return_logprob=want_lp, top_logprobs_num=req.logprobs or 0,
                                                logprob_start_len=(0 if echo else len(ids)) if want_lp else None))
            streams = await self.client.start(requests, request)
        except RequestError as e:
            raise from_request_error(e, self._names(req, "prompt")) from None
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            events = self._completion_events(streams, rid, created, want_lp, include_usage, req.n)
            return SSEResponse(sse_body(events, streams))
        choices = []
        for i, s in enumerate(await collect(streams, request)):
            out = s.output
            prefix = self.info.tokenizer.decode(list(s.request.input_ids)) if req.echo else ""
            lp = None
            if want_lp:
                pairs, tops = list(out.output_token_logprobs or ()), list(out.output_top_logprobs or ())
                if req.echo:
                    pairs = list(out.input_token_logprobs or ()) + pairs
                    tops = list(out.input_top_logprobs or ()) + tops
                lp = self.logprobs.completion(pairs, tops, len(prefix) if not req.echo else 0)
            choices.append({"index": i, "text": prefix + out.text, "logprobs": lp, "finish_reason": finish_reason(s),
                            "matched_stop": matched_stop(s)})
        return _json({"id": rid, "object": "text_completion", "created": created, "model": self.info.name,
                      "choices": choices, "usage": usage(streams, per_prompt=req.n)})

    async def _completion_events(self, streams: list[RequestStream], rid: str, created: int, want_lp: bool,
                                 include_usage: bool, n: int) -> AsyncIterator[bytes]:
        def chunk(choices: list[dict], **extra: Any) -> bytes:
            return sse_event({"id": rid, "object": "text_completion", "created": created, "model": self.info.name,
                              "choices": choices, **extra})
        offsets = [0] * len(streams)
        async for i, c in merge_chunks(streams):
            if i == IDLE:
                yield SSE_KEEPALIVE
            elif c is None:
                yield chunk([{"index": i, "text": "", "logprobs": None, "finish_reason": finish_reason(streams[i]),
                              "matched_stop": matched_stop(streams[i])}])
            elif c.text_delta or (want_lp and c.new_token_logprobs):
                lp = self.logprobs.completion(c.new_token_logprobs, c.new_top_logprobs, offsets[i]) if want_lp else None
                offsets[i] += len(c.text_delta)
                yield chunk([{"index": i, "text": c.text_delta, "logprobs": lp, "finish_reason": None}])
        if include_usage:
            yield chunk([], usage=usage(streams, per_prompt=n))

    # --- shared -----------------------------------------------------------------------------------------------
    async def _encode(self, text: str, param: str) -> list[int]:
        tok = self.info.tokenizer
        # long prompts are tokenized off the event loop so other requests keep streaming meanwhile
        ids = tok.encode(text) if len(text) < 4096 else await asyncio.to_thread(tok.encode, text)
        if not ids:
            raise bad_request(f"'{param}' is empty after tokenization", param=param)
        return ids

    def _check_ids(self, ids: list[int]) -> None:
        vocab = self.info.vocab_size
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise bad_request(f"token ids must be in [0, {vocab}), got {bad[:5]}", param="prompt")

    @staticmethod
    def _names(req: ChatCompletionRequest | CompletionRequest, prompt_param: str) -> dict[str, str]:
        """Engine param names -> the fields of this request (a schema from response_format is named so)."""
        names = {**OPENAI_PARAM_NAMES, "prompt": prompt_param, "input_ids": prompt_param}
        if req.response_format is not None and req.json_schema is None:
            names["json_schema"] = "response_format"
        if getattr(req, "tools", None) and req.tool_choice != "none":
            names["json_schema"] = "tools"   # the call schema, built from the tools' parameters
            names["structural_tag"] = "tools"
        return names

    def _sampling_params(self, req: ChatCompletionRequest | CompletionRequest, prompt_len: int,
                         max_tokens: int | None, prompt_param: str, default_max_tokens: int | None = None
                         ) -> SamplingParams:
        """The request's SamplingParams; raises RequestError (engine names) or APIError."""
        ctx = self.info.max_context
        if prompt_len >= ctx:
            raise APIError(400, f"the prompt has {prompt_len} tokens but the model's context length is {ctx}; "
                           "shorten the prompt", param=prompt_param, code="context_length_exceeded")
        if max_tokens is None:
            max_tokens = ctx - prompt_len if default_max_tokens is None else min(default_max_tokens, ctx - prompt_len)
        elif max_tokens >= 0 and prompt_len + max_tokens > ctx:
            raise APIError(400, f"the prompt ({prompt_len} tokens) plus max_tokens ({max_tokens}) exceeds the model's "
                           f"context length of {ctx}; lower max_tokens or shorten the prompt", param="max_tokens",
                           code="context_length_exceeded")
        if not req.n <= MAX_N:
            raise bad_request(f"'n' must be between 1 and {MAX_N}, got {req.n}", param="n")
        for key, bias in (req.logit_bias or {}).items():
            if not -100 <= bias <= 100:
                raise bad_request(f"'logit_bias' values must be between -100 and 100, got {bias} for {key!r}",
                                  param="logit_bias")
        top = getattr(req, "top_logprobs", None)
        if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
            raise bad_request(f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}, got {top}",
                              param="top_logprobs")
        sources = [k for k in CONSTRAINT_KINDS if getattr(req, k) is not None]
        schema = response_format_schema(req.response_format)
        if schema is not None:
            sources.append("response_format")
        if len(sources) > 1:
            raise bad_request(f"set only one of {', '.join(CONSTRAINT_KINDS)} and response_format (got {sources})",
                              param=sources[-1])
        params = {key: getattr(req, key) for key in _PASSTHROUGH}
        params.update(max_new_tokens=max_tokens, min_new_tokens=req.min_tokens, logit_bias=req.logit_bias)
        if schema is not None:
            params["json_schema"] = schema
        if getattr(req, "sources", None) is not None:
            from sglite.grounding import with_sources
            params["json_schema"] = with_sources(params.get("json_schema"), req.sources)
        p = SamplingParams.from_dict(params)
        p.check_vocab(self.info.vocab_size)
        return p


def _reader_delta(reader: ToolCallText | ToolReplyText, text: str, final: bool, greeted: bool) -> dict[str, Any]:
    """The chat delta for `text` of a choice with tools; a `required` call's first delta says content is null."""
    if isinstance(reader, ToolReplyText):
        return reader.feed(text, final)
    pieces = reader.feed(text, final)
    d: dict[str, Any] = {"tool_calls": pieces} if pieces else {}
    return d if greeted or not d else {"content": None, **d}


def _tools_finish(plan: ToolPlan | None, s: Any, called: bool) -> str:
    """'tool_calls' for a `required` reply that is a call, or an `auto` reply that made calls and stopped (not
    cut by max_tokens); otherwise the engine's finish reason."""
    engine = finish_reason(s)
    if plan is None or not called:
        return engine
    return "tool_calls" if plan.mode == "required" or engine == "stop" else engine


def _json(body: dict) -> Response:
    return Response(dumps(body), media_type="application/json")
