"""A stand-in engine implementing `sglite.protocol.EngineAPI`, for server tests that must not depend on the real
scheduler: a thread emits one word token per step for each running sample, and slot use is tracked so tests
can check that aborts free everything. Validation is protocol's (SamplingParams, GenerateRequest) plus what
only an engine knows: the context, the pool, and a stand-in grammar compiler (Python's `re`)."""
from __future__ import annotations

import asyncio
import queue
import re
import threading
import time
from typing import Any, AsyncIterator, Iterator

from sglite.protocol import (ABORT_BY_CLIENT, ABORT_SHUTDOWN, FinishReason, GenerateOutput, GenerateRequest,
                             RequestError, StreamChunk)

WORDS = "the quick brown fox jumps over a lazy dog and runs away".split()


class FakeHandle:
    """One sample: chunks go through an asyncio.Queue on `loop`, or a queue.Queue without one."""

    def __init__(self, rid: str, loop: asyncio.AbstractEventLoop | None):
        self.rid = rid
        self._loop = loop
        self._queue: Any = asyncio.Queue() if loop is not None else queue.Queue()
        self._done = threading.Event()
        self._output: GenerateOutput | None = None

    def push(self, chunk: StreamChunk, output: GenerateOutput | None) -> None:
        """Engine thread: the next chunk; `output` with the last one."""
        if output is not None:
            self._output = output
            self._done.set()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        else:
            self._queue.put(chunk)

    def __iter__(self) -> Iterator[StreamChunk]:
        if self._loop is not None:
            raise TypeError("submitted with an event loop: use `async for`")
        while not (chunk := self._queue.get()).finished:
            yield chunk
        yield chunk

    async def __aiter__(self) -> AsyncIterator[StreamChunk]:
        if self._loop is None:
            raise TypeError("submitted without an event loop: use `for`")
        while not (chunk := await self._queue.get()).finished:
            yield chunk
        yield chunk

    def output(self) -> GenerateOutput:
        self._done.wait()
        return self._output


class _Sample:
    def __init__(self, rid: str, request: GenerateRequest, ids: tuple[int, ...], handle: FakeHandle):
        self.rid, self.request, self.ids, self.handle = rid, request, ids, handle
        self.out: list[int] = []
        self.text = ""
        self.logprobs: list[tuple] = []
        self.tops: list[list[tuple]] = []
        self.abort: FinishReason | None = None


def mark_aborted(samples, rid: str) -> None:
    """Marks the samples of request `rid` (its id, or `rid-i` for n > 1) aborted by the client; the engine's
    thread ends them at its next step. The caller holds the lock that guards `samples`."""
    for s in samples:
        if s.rid == rid or s.rid.startswith(rid + "-"):
            s.abort = s.abort or FinishReason.abort(ABORT_BY_CLIENT, "aborted by request")


class FakeEngine:
    def __init__(self, tokenizer: Any, max_context: int = 4096, step_s: float = 0.001, total_slots: int = 100_000):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.step_s = step_s
        self.total_slots = total_slots
        self.used_slots = 0
        self._lock = threading.Lock()
        self._running: dict[str, _Sample] = {}
        self._stop = threading.Event()
        self._closed = False
        self._word_ids = [tokenizer.encode(" " + w)[0] for w in WORDS]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    # --- EngineAPI ---
    def submit(self, request: GenerateRequest, loop: asyncio.AbstractEventLoop | None = None) -> list[FakeHandle]:
        if self._closed:
            raise RuntimeError("the engine is shut down")
        ids = request.input_ids if request.input_ids is not None else tuple(self.tokenizer.encode(request.text))
        param = "prompt" if request.text is not None else "input_ids"
        if not ids:
            raise RequestError(param, "invalid_value", "the prompt is empty")
        if any(not 0 <= t < self.tokenizer.vocab_size for t in ids):
            raise RequestError("input_ids", "invalid_value", "input_ids holds ids outside the vocabulary")
        if len(ids) >= self.max_context:
            raise RequestError(param, "context_length_exceeded",
                               f"the prompt has {len(ids)} tokens; the context holds {self.max_context}")
        p = request.params
        if len(ids) + p.max_new_tokens > self.total_slots:
            raise RequestError("max_new_tokens", "context_length_exceeded", "prompt + max_new_tokens exceeds the pool")
        if p.regex is not None:
            try:
                re.compile(p.regex)
            except re.error as e:
                raise RequestError("regex", "invalid_grammar", f"regex does not compile: {e}") from None
        samples = [_Sample(rid, request, ids, FakeHandle(rid, loop)) for rid in request.sample_ids()]
        with self._lock:
            if any(s.rid in self._running for s in samples):
                raise RequestError("rid", "invalid_value", f"request id {request.rid!r} is already in flight")
            for s in samples:
                self.used_slots += len(ids)
                self._running[s.rid] = s
        return [s.handle for s in samples]

    def abort(self, rid: str) -> None:
        with self._lock:
            mark_aborted(self._running.values(), rid)

    # --- the rest of Engine's surface the server uses ---
    def flush_cache(self) -> bool:
        return True

    def get_stats(self) -> dict:
        with self._lock:
            return {"num_running": len(self._running), "num_waiting": 0, "pool_tokens": self.total_slots,
                    "pool_free_tokens": self.total_slots - self.used_slots, "cache_hit_rate": 0.0}

    def shutdown(self) -> None:
        self._closed = True
        with self._lock:
            for s in self._running.values():
                s.abort = FinishReason.abort(ABORT_SHUTDOWN, "engine shut down")
        time.sleep(5 * self.step_s)
        self._stop.set()
        self._thread.join(timeout=5)

    # --- the "scheduler" ---
    def _loop(self) -> None:
        while not self._stop.is_set():
            time.sleep(self.step_s)
            with self._lock:
                samples = list(self._running.values())
            for s in samples:
                self._step(s)

    def _step(self, s: _Sample) -> None:
        finish, new = s.abort, ()
        if finish is None and s.request.params.max_new_tokens == 0:   # prefill only
            finish = FinishReason.length()
        elif finish is None:
            new = (self._word_ids[len(s.out) % len(self._word_ids)],)
            s.out += new
            with self._lock:
                self.used_slots += 1
            if len(s.out) >= s.request.params.max_new_tokens:
                finish = FinishReason.length()
        text = self.tokenizer.decode(list(new))
        s.text += text
        r = s.request
        lps = tuple((-0.5, t, self.tokenizer.decode([t])) for t in new) if r.return_logprob else ()
        tops = tuple([(-0.5, t, self.tokenizer.decode([t]))] * r.top_logprobs_num for t in new) \
            if r.return_logprob else ()
        s.logprobs += lps
        s.tops += tops
        chunk = StreamChunk(s.rid, text, new, lps, tops, prompt_tokens=len(s.ids), completion_tokens=len(s.out),
                            finish_reason=finish)
        output = None
        if finish is not None:
            with self._lock:
                self.used_slots -= len(s.ids) + len(s.out)
                del self._running[s.rid]
            output = GenerateOutput(s.rid, s.text, tuple(s.out), finish, len(s.ids),
                                    output_token_logprobs=tuple(s.logprobs) if r.return_logprob else None,
                                    output_top_logprobs=tuple(s.tops) if r.return_logprob else None)
        s.handle.push(chunk, output)
