"""Server-sent events: a streaming response that always notices a client leaving, and JSON encoding that
never writes the invalid tokens `NaN` / `Infinity` (a logprob of a masked-out token is -inf)."""
from __future__ import annotations

import asyncio
import json
import math
from typing import Any, AsyncIterator

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sglite.protocol import StreamChunk

from .engine_client import RequestStream
from .api_errors import APIError

NEG_INF_LOGPROB = -9999.0  # what OpenAI's API sends for a logprob of -inf


def finite(value: Any) -> Any:
    """Copy of a JSON-able value with tuples as lists and non-finite floats replaced."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return NEG_INF_LOGPROB if value < 0 else -NEG_INF_LOGPROB
        return value
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(finite(value), ensure_ascii=False, separators=(",", ":"))


def sse_event(value: Any) -> bytes:
    return f"data: {value if isinstance(value, str) else dumps(value)}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


class SSEResponse(StreamingResponse):
    """Streams `content` as text/event-stream. Whatever ASGI spec version the server speaks, a disconnect
    cancels the stream at once (not at the next write), and the iterator is always closed, so its `finally`
    (which aborts the engine request) runs promptly."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes]):
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # client gone while writing
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                await self.listen_for_disconnect(receive)
                tg.cancel_scope.cancel()
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()


IDLE = -1  # index merge_chunks yields when nothing arrived for `idle_s` (time for an SSE keep-alive comment)
SSE_KEEPALIVE = b": keep-alive\n\n"


async def merge_chunks(streams: list[RequestStream], idle_s: float = 15.0
                       ) -> AsyncIterator[tuple[int, StreamChunk | None]]:
    """Interleaves the chunks of several streams as (index, delta); (index, None) marks that stream's end, and
    (IDLE, None) that nothing came for `idle_s` seconds (a long queue or prefill), so proxies and clients can
    be kept from timing the connection out. An engine error in any stream is re-raised here."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, s: RequestStream) -> None:
        try:
            async for c in s.chunks():
                queue.put_nowait((i, c))
            queue.put_nowait((i, None))
        except Exception as e:
            queue.put_nowait((i, e))

    tasks = [asyncio.get_running_loop().create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            try:
                i, item = await asyncio.wait_for(queue.get(), idle_s)
            except asyncio.TimeoutError:
                yield IDLE, None
                continue
            if isinstance(item, Exception):
                raise item
            if item is None:
                left -= 1
            yield i, item
    finally:
        for t in tasks:
            t.cancel()


async def sse_body(events: AsyncIterator[bytes], streams: list[RequestStream]) -> AsyncIterator[bytes]:
    """The body of every streaming endpoint: `events`, then `[DONE]`. An APIError raised mid-stream becomes an
    error event; on any exit (finished, failed, client gone) the engine requests behind `streams` are cancelled."""
    try:
        async for event in events:
            yield event
    except APIError as e:
        yield sse_event(e.body())
    finally:
        await events.aclose()
        for s in streams:
            s.cancel()
    yield SSE_DONE
