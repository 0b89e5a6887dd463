"""RequestHandle: the caller's side of one queued sample.

The engine's thread pushes StreamChunks; the caller iterates them (`for` on a thread, `async for` on the event
loop it submitted from) or waits for the GenerateOutput, which is assembled here, on the caller's thread, from
the chunks: the engine's step never builds result objects. With an inline engine (no thread) `pump` steps the
engine whenever the caller waits on an empty queue."""
from __future__ import annotations

import asyncio
import queue
from typing import Any, AsyncIterator, Callable, Iterator

from sglite.protocol import GenerateOutput, StreamChunk


class RequestHandle:
    def __init__(self, rid: str, return_logprob: bool = False, aloop: asyncio.AbstractEventLoop | None = None,
                 pump: Callable[[], None] | None = None):
        self.rid = rid
        self.return_logprob = return_logprob
        self._aloop = aloop
        self._pump = pump            # inline engines: one engine step
        self._queue: Any = asyncio.Queue() if aloop is not None else queue.SimpleQueue()
        self._chunks: list[StreamChunk] = []
        self._output: GenerateOutput | None = None

    # --- the engine's side -----------------------------------------------------------------------------------
    def push(self, chunk: StreamChunk) -> None:
        if self._aloop is not None:
            self._aloop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        else:
            self._queue.put(chunk)

    # --- the caller's side -----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StreamChunk]:
        if self._aloop is not None:
            raise TypeError("this request was submitted with an event loop: use `async for`")
        while self._output is None:
            while self._pump is not None and self._queue.empty():
                self._pump()
            yield self._record(self._queue.get())

    async def __aiter__(self) -> AsyncIterator[StreamChunk]:
        if self._aloop is None:
            raise TypeError("this request was submitted without an event loop: use `for`")
        while self._output is None:
            yield self._record(await self._queue.get())

    def output(self) -> GenerateOutput:
        """Waits for the end (consuming the chunks not yet read) and returns the result; once the end has been
        read (by `for` or `async for`), returns at once, on any thread."""
        if self._output is None:
            for _ in self:
                pass
        return self._output

    async def aoutput(self) -> GenerateOutput:
        async for _ in self:
            pass
        return self._output

    def _record(self, chunk: StreamChunk) -> StreamChunk:
        self._chunks.append(chunk)
        if chunk.finished:
            self._output = _assemble(self.rid, self._chunks, self.return_logprob)
            self._chunks = []
        return chunk


def _assemble(rid: str, chunks: list[StreamChunk], with_lp: bool) -> GenerateOutput:
    """The output from a sample's chunks; the last one carries the totals and the engine-side latencies."""
    last = chunks[-1]
    return GenerateOutput(
        rid=rid, text="".join(c.text_delta for c in chunks),
        output_ids=tuple(t for c in chunks for t in c.new_token_ids), finish_reason=last.finish_reason,
        prompt_tokens=last.prompt_tokens, cached_tokens=last.cached_tokens, forced_tokens=last.forced_tokens,
        decode_passes=last.decode_passes, spec_accepted_tokens=last.spec_accepted_tokens,
        capped_values=last.capped_values, closed_at_budget=last.closed_at_budget,
        input_token_logprobs=tuple(x for c in chunks for x in c.input_token_logprobs) if with_lp else None,
        input_top_logprobs=tuple(x for c in chunks for x in c.input_top_logprobs) if with_lp else None,
        output_token_logprobs=tuple(x for c in chunks for x in c.new_token_logprobs) if with_lp else None,
        output_top_logprobs=tuple(x for c in chunks for x in c.new_top_logprobs) if with_lp else None,
        output_token_constrained_logprobs=None if last.new_token_constrained_logprobs is None
        else tuple(x for c in chunks for x in c.new_token_constrained_logprobs or ()),
        e2e_latency=last.e2e_latency, ttft=last.ttft)
