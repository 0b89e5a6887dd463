"""The one place the server talks to the engine.

The engine runs its scheduling loop in its own thread; handlers live on the asyncio event loop. Each request
gets a `RequestStream`: a small pump task iterates the engine's async stream and puts chunks on an
`asyncio.Queue`, and the handler reads the queue. The handler never calls into the engine's blocking paths,
and cancelling the handler (client gone) never throws into the engine's generator: it only asks the pump to
abort the request by id, and the pump drains the stream until the engine confirms the abort.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from starlette.requests import Request

from .errors import APIError, from_value_error
from .metrics import ServerMetrics

_ACCEPTED = object()  # the engine validated and queued the request
_END = object()       # the engine's stream is over


@dataclass(frozen=True)
class GenerateCall:
    """One engine request: the arguments of `Engine.async_generate` for a single prompt."""

    sampling_params: dict[str, Any]
    input_ids: list[int] | None = None
    text: str | None = None
    return_logprob: bool = False
    logprob_start_len: int | None = None
    top_logprobs_num: int = 0
    # Ask the engine for a stream (abortable from its first chunk) or one final result. Non-streamed requests
    # with logprobs use the latter: the engine's stream drops the logprobs of steps whose text it holds back.
    engine_stream: bool = True
    prompt_param: str = "prompt"  # the request field an over-long prompt error names

    @property
    def constraint(self) -> str | None:
        return next((k for k in ("regex", "json_schema", "ebnf") if self.sampling_params.get(k) is not None), None)

    def engine_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"sampling_params": self.sampling_params, "return_logprob": self.return_logprob,
                              "top_logprobs_num": self.top_logprobs_num, "stream": self.engine_stream}
        if self.logprob_start_len is not None:
            kw["logprob_start_len"] = self.logprob_start_len
        if self.input_ids is not None:
            kw["input_ids"] = self.input_ids
        else:
            kw["prompt"] = self.text
        return kw


@dataclass
class Delta:
    """What one engine chunk added: text, token ids, and (when asked) their logprobs."""

    text: str
    token_ids: list[int]
    token_logprobs: list[tuple]          # (logprob, token_id, text) per new output token
    top_logprobs: list[list[tuple]]      # per new output token, its top-k alternatives


def _new_items(items: list | None, seen: int, total: int) -> list:
    """New entries of a per-output-token list from a stream chunk. Works whether the engine sends the list
    cumulatively (len == total tokens so far) or as an increment (len == total - seen)."""
    if not items:
        return []
    if len(items) == total and total >= seen:
        return list(items[seen:])
    return list(items)


@dataclass
class Accumulated:
    """The whole response so far, built from stream chunks."""

    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    output_token_logprobs: list[tuple] = field(default_factory=list)
    output_top_logprobs: list[list[tuple]] = field(default_factory=list)
    meta_info: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    def add(self, chunk: dict[str, Any]) -> Delta:
        meta = dict(chunk.get("meta_info") or {})
        seen = len(self.output_ids)
        ids = chunk.get("output_ids") or []
        total = int(meta.get("completion_tokens", seen + len(ids)))
        new_ids = _new_items(ids, seen, total)
        new_lp = _new_items(meta.get("output_token_logprobs"), len(self.output_token_logprobs), total)
        new_top = _new_items(meta.get("output_top_logprobs"), len(self.output_top_logprobs), total)
        text = chunk.get("text") or ""
        self.text += text
        self.output_ids += new_ids
        self.output_token_logprobs += new_lp
        self.output_top_logprobs += new_top
        for key in ("input_token_logprobs", "input_top_logprobs"):  # keep the first full copy we see
            if key in self.meta_info and key in meta and meta[key] is not None:
                if len(meta[key]) < len(self.meta_info[key] or []):
                    meta[key] = self.meta_info[key]
        self.meta_info.update(meta)
        if self.output_token_logprobs:
            self.meta_info["output_token_logprobs"] = self.output_token_logprobs
            self.meta_info["output_top_logprobs"] = self.output_top_logprobs
        if meta.get("finish_reason"):
            self.finished = True
        return Delta(text, new_ids, new_lp, new_top)

    def result(self) -> dict[str, Any]:
        """The same shape `Engine.generate` returns for a finished request."""
        return {"text": self.text, "output_ids": self.output_ids, "meta_info": self.meta_info}

    @property
    def finish_type(self) -> str | None:
        reason = self.meta_info.get("finish_reason")
        return reason.get("type") if isinstance(reason, dict) else reason


class RequestStream:
    """A running engine request. `await start()` once: it returns as soon as the engine has validated and
    queued the request (or raises APIError(400) when the engine rejects it), so response headers need not wait
    for the first token. Then iterate `deltas()`; `cancel()` aborts it. Mutates `acc` as chunks arrive."""

    def __init__(self, engine: Any, call: GenerateCall, metrics: ServerMetrics | None = None,
                 on_exit: Callable[[], None] | None = None):
        self.engine = engine
        self.call = call
        self.metrics = metrics
        self._on_exit = on_exit  # called once: when the engine's stream ends, or start() never got that far
        self._exited = False
        self.acc = Accumulated()
        self.rid: str | None = None
        self._queue: asyncio.Queue = asyncio.Queue()
        self._abort_wanted = False
        self._pump_task: asyncio.Task | None = None
        self._t0 = time.perf_counter()
        self._t_last = self._t0
        self._ttft_seen = False

    async def start(self) -> None:
        try:
            if self.call.constraint is not None:
                await asyncio.to_thread(_compile_grammar, self.engine, self.call.sampling_params)
            self._pump_task = asyncio.get_running_loop().create_task(self._pump())
        except BaseException:
            self._exit()
            raise
        first = await self._queue.get()
        if isinstance(first, BaseException):
            raise _to_api_error(first, self.call)

    async def deltas(self) -> AsyncIterator[Delta]:
        """Yields one Delta per engine chunk until the request finishes."""
        item = await self._queue.get()
        while item is not _END:
            if isinstance(item, BaseException):
                raise _to_api_error(item, self.call)
            yield self._record(self.acc.add(item))
            item = await self._queue.get()
        failure = self.failure()
        if failure is not None:
            raise failure

    async def result(self) -> dict[str, Any]:
        async for _ in self.deltas():
            pass
        return self.acc.result()

    def failure(self) -> APIError | None:
        """An error when the engine aborted the request on its own (internal error, shutdown): a client must
        not mistake the partial output for a finished response."""
        reason = self.acc.meta_info.get("finish_reason")
        if self._abort_wanted or not isinstance(reason, dict) or reason.get("type") != "abort":
            return None
        message = reason.get("message") or "the engine aborted the request"
        if "shut down" in message:
            return APIError(503, f"server is shutting down: {message}", code="shutting_down")
        return APIError(500, f"generation failed: {message}", code="internal_error")

    def cancel(self) -> None:
        """Abort the request (idempotent). Safe from a finally block of a cancelled task."""
        if self.acc.finished or self._abort_wanted:
            return
        self._abort_wanted = True
        if self.rid is not None:
            self.engine.abort(self.rid)
        if self.metrics is not None:
            self.metrics.aborted_by_client.inc()

    async def _pump(self) -> None:
        if self.metrics is not None:
            self.metrics.inflight.inc()
        last: dict[str, Any] = {}
        try:
            stream = self.engine.async_generate(**self.call.engine_kwargs())
            if inspect.isawaitable(stream):
                stream = await stream
            if isinstance(stream, dict):  # engine_stream=False: the final result, as one chunk
                stream = _single(stream)
            self._queue.put_nowait(_ACCEPTED)
            async for chunk in stream:
                if self.rid is None:
                    self.rid = (chunk.get("meta_info") or {}).get("id")
                    if self._abort_wanted and self.rid is not None:
                        self.engine.abort(self.rid)
                last = chunk
                self._queue.put_nowait(chunk)
        except asyncio.CancelledError:
            self._queue.put_nowait(RuntimeError("server is shutting down"))
            raise
        except BaseException as e:  # handed to the reader, which turns it into an HTTP error
            self._queue.put_nowait(e)
        finally:
            self._queue.put_nowait(_END)
            self._exit()
            if self.metrics is not None:
                self.metrics.inflight.dec()
                if last:
                    self._finish_metrics(last.get("meta_info") or {})

    def _exit(self) -> None:
        if not self._exited:
            self._exited = True
            if self._on_exit is not None:
                self._on_exit()

    def _record(self, delta: Delta) -> Delta:
        if self.metrics is None or not delta.token_ids:
            return delta
        now = time.perf_counter()
        if not self._ttft_seen:
            self._ttft_seen = True
            self.metrics.ttft.observe(now - self._t0)
            extra = len(delta.token_ids) - 1
        else:
            extra = len(delta.token_ids)
        if extra > 0:
            self.metrics.tpot.observe((now - self._t_last) / extra)
        self._t_last = now
        return delta

    def _finish_metrics(self, meta: dict[str, Any]) -> None:
        """Counts a request once the pump has seen its last chunk (also when nobody reads it any more)."""
        m = self.metrics
        m.prompt_tokens.inc(int(meta.get("prompt_tokens") or 0))
        m.generation_tokens.inc(int(meta.get("completion_tokens") or 0))
        m.cached_tokens.inc(int(meta.get("cached_tokens") or 0))
        reason = meta.get("finish_reason")
        m.finished.labels(reason=str((reason.get("type") if isinstance(reason, dict) else reason) or "unknown")).inc()
        m.e2e_latency.observe(time.perf_counter() - self._t0)


def _compile_grammar(engine: Any, sampling_params: dict[str, Any]) -> None:
    """Compiles a request's regex / JSON schema on a worker thread, so that the compile inside
    `engine.async_generate` (which runs on the event loop) is a cache hit and does not stall other requests.
    Best effort: any error is left for the real submission to raise."""
    backend = getattr(engine, "grammar", None)
    if backend is None or not hasattr(backend, "compile"):
        return
    try:
        from sglite.runtime.engine import SamplingParams

        backend.compile(SamplingParams.from_dict(sampling_params))
    except Exception:
        pass


async def _single(result: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield result


def _to_api_error(err: BaseException, call: GenerateCall) -> APIError:
    if isinstance(err, APIError):
        return err
    if isinstance(err, ValueError):
        return from_value_error(err, prompt_param=call.prompt_param, constraint=call.constraint)
    if isinstance(err, TypeError):
        return APIError(400, str(err), code="invalid_type")
    if isinstance(err, RuntimeError) and "shut down" in str(err):
        return APIError(503, f"server is shutting down: {err}", code="shutting_down")
    return APIError(500, f"internal error: {type(err).__name__}: {err}", code="internal_error")


class EngineClient:
    """The server's handle on the engine: starts requests and counts those in flight. Past `max_pending`
    in-flight requests new ones get a 503 at once instead of growing the engine's queue without bound."""

    def __init__(self, engine: Any, metrics: ServerMetrics | None = None, max_pending: int | None = None):
        self.engine = engine
        self.metrics = metrics
        self.max_pending = max_pending
        self.pending = 0  # engine requests whose stream has not ended; event-loop thread only

    async def start_all(self, calls: list[GenerateCall]) -> list[RequestStream]:
        """Start every call; if any is rejected, abort the ones already started and raise its error."""
        if self.max_pending is not None and self.pending + len(calls) > self.max_pending:
            raise APIError(503, f"server busy: {self.pending} requests in flight, the limit is {self.max_pending}; "
                           "retry later", code="server_overloaded", headers={"Retry-After": "1"})
        streams = [RequestStream(self.engine, c, self.metrics, on_exit=self._exit) for c in calls]
        self.pending += len(streams)
        results = await asyncio.gather(*(s.start() for s in streams), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for s, r in zip(streams, results):
                if not isinstance(r, BaseException):
                    s.cancel()
            raise errors[0]
        return streams

    def _exit(self) -> None:
        self.pending -= 1


async def collect(streams: list[RequestStream], request: Request) -> list[RequestStream]:
    """Waits for every stream to finish; aborts them all if the client disconnects first."""
    async def run() -> None:
        await asyncio.gather(*(s.result() for s in streams))

    work = asyncio.ensure_future(run())
    watch = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait([work, watch], return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            raise APIError(499, "client disconnected", code="client_closed_request")
        work.result()
        return streams
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
            for s in streams:
                s.cancel()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
