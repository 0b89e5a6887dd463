"""AutoToolStream: one chat choice under `tool_choice: "auto"`, read like a RequestStream (chunks, finish, last,
output, request, cancel) by the OpenAI handlers.

The model's free reply is read until its first non-blank character. Not `{`: the reply is text, and its chunks
(held back until then) flow on. `{`: the model chose to call a function; that sample is aborted and the
choice is generated again from the same prompt under the call schema (tools.ToolPlan.call_schema), so the call
is always complete and valid. `is_call` says which, once known (before the first chunk is yielded)."""
from __future__ import annotations

from typing import Any, AsyncIterator

from sglite.protocol import GenerateRequest, RequestError, StreamChunk

from .engine_client import EngineClient, RequestStream
from .errors import from_request_error
from .tools import starts_call


class AutoToolStream:
    def __init__(self, client: EngineClient, first: RequestStream, call_request: GenerateRequest):
        self.client = client
        self.current = first
        self.call_request = call_request   # this choice's reply as a call, started if the model calls
        self.is_call: bool | None = None

    @property
    def request(self) -> GenerateRequest:
        return self.current.request

    @property
    def last(self) -> StreamChunk | None:
        return self.current.last

    @property
    def output(self) -> Any:
        return self.current.output

    def cancel(self) -> None:
        self.current.cancel()

    async def finish(self) -> "AutoToolStream":
        async for _ in self.chunks():
            pass
        return self

    async def chunks(self) -> AsyncIterator[StreamChunk]:
        held: list[StreamChunk] = []
        text = ""
        async for c in self.current.chunks():
            if self.is_call is None:
                held.append(c)
                text += c.text_delta
                decided = starts_call(text)
                if decided is None and not c.finished:
                    continue
                self.is_call = bool(decided)
                if self.is_call:
                    break
                for h in held:
                    yield h
                continue
            yield c
        if not self.is_call:
            return
        self.current.cancel()
        try:
            self.current = (await self.client.start([self.call_request]))[0]
        except RequestError as e:   # the schema compiled before; this is the context or the pool
            raise from_request_error(e, {"json_schema": "tools", "prompt": "messages"}) from None
        async for c in self.current.chunks():
            yield c
