"""The one place the server talks to the engine, through `sglite.protocol.EngineAPI` only.

`EngineClient.start` submits GenerateRequests on a worker thread (submission tokenizes and compiles grammars,
seconds for a large JSON schema) and returns one `RequestStream` per sample. A pump task per sample iterates
its handle into a queue the handler reads: a handler cancelled because its client left never touches the
engine's iterator, it aborts the request by rid, and the pump drains to the engine's last chunk, so the
in-flight count and the metrics stay exact."""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator

from starlette.requests import Request

from sglite.protocol import (ABORT_BY_CLIENT, ABORT_SHUTDOWN, FinishKind, GenerateOutput, GenerateRequest, RequestError,
                             StreamChunk)

from .api_errors import APIError
from .metrics import RequestClock, ServerMetrics

logger = logging.getLogger(__name__)
_END = object()
COMPILE_WORKERS = 2   # grammar compiles at once; each is bounded by the engine's compile budget


class _ClientGone(Exception):
    """The HTTP client disconnected while its requests were being submitted."""


def _internal_error(e: BaseException) -> APIError:
    logger.error("engine failed", exc_info=e)
    return APIError(500, f"internal error: {type(e).__name__}: {e}", code="internal_error")


class RequestStream:
    """One engine sample. Iterate `chunks()` (or await `finish()`); `last` is the newest chunk the engine sent
    (totals, finish_reason), `output` the GenerateOutput once it ended; `cancel()` aborts. Made on the loop."""

    def __init__(self, client: "EngineClient", request: GenerateRequest, handle: Any):
        self.client, self.request, self.handle = client, request, handle
        self.last: StreamChunk | None = None
        self.output: GenerateOutput | None = None
        self.aborted = False   # this server asked the engine to abort it
        self._queue: asyncio.Queue = asyncio.Queue()
        self._clock = RequestClock(client.metrics)
        self._pump = asyncio.get_running_loop().create_task(self._run())

    async def chunks(self) -> AsyncIterator[StreamChunk]:
        """The engine's chunks to the last; then raises APIError if the engine, not this server, aborted it."""
        while (item := await self._queue.get()) is not _END:
            if isinstance(item, APIError):
                raise item
            yield item
        reason = self.last.finish_reason
        # partial output is no response, unless a client asked for the abort (POST /abort_request): then the
        # result says so, as SGLang's does
        if reason.kind is FinishKind.ABORT and not self.aborted and reason.code != ABORT_BY_CLIENT:
            if reason.code == ABORT_SHUTDOWN:
                raise APIError(503, f"server is shutting down: {reason.message}", code="shutting_down")
            raise APIError(500, f"generation failed: {reason.message}", code=reason.code or "internal_error")

    async def finish(self) -> "RequestStream":
        async for _ in self.chunks():
            pass
        return self

    def cancel(self) -> None:
        """Aborts this sample (idempotent; the request's other samples run on). Safe from a finally block of a
        cancelled task."""
        if self.aborted or (self.last is not None and self.last.finished):
            return
        self.aborted = True
        self.client.engine.abort(getattr(self.handle, "rid", None) or self.request.rid)
        if self.client.metrics is not None:
            self.client.metrics.aborted_by_client.inc()

    async def _run(self) -> None:
        try:
            async for chunk in self.handle:
                self.last = chunk
                self._clock.on_chunk(chunk)
                self._queue.put_nowait(chunk)
            if self.last is None or not self.last.finished:
                raise RuntimeError(f"the stream of {self.handle.rid!r} ended without a finish_reason")
            self.output = self.handle.output()   # the end was reached: returns at once
        except asyncio.CancelledError:   # the event loop is closing
            self._queue.put_nowait(APIError(503, "server is shutting down", code="shutting_down"))
            raise
        except Exception as e:   # an engine bug: this reader gets a 500, the server keeps serving
            self._queue.put_nowait(_internal_error(e))
        finally:
            self._queue.put_nowait(_END)
            self.client.pending -= 1


class EngineClient:
    """Starts engine requests and counts the samples in flight. Past `max_pending` of them new requests get a
    503 at once instead of growing the engine's queue without bound."""

    def __init__(self, engine: Any, metrics: ServerMetrics | None = None, max_pending: int | None = None):
        self.engine = engine
        self.metrics = metrics
        self.max_pending = max_pending
        self.pending = 0   # samples submitted whose pump has not ended; event-loop thread only
        # a request with a constraint is submitted (and its grammar compiled, up to its budget) on this small pool,
        # so any number of slow compiles queue here while plain requests go straight to the engine
        self._compiles = ThreadPoolExecutor(max_workers=COMPILE_WORKERS, thread_name_prefix="sglite-compile")
        if metrics is not None:
            metrics.inflight.set_function(lambda: self.pending)

    async def start(self, requests: list[GenerateRequest], http: Request | None = None) -> list[RequestStream]:
        """Submits every request, all or none, and returns their samples' streams, request-major. A refused
        request raises its RequestError (those already queued are aborted); an engine bug raises APIError(500).
        If the handler is cancelled, or `http`'s client disconnects, while the requests are being submitted
        (their grammars compiled), the requests are aborted at once, which cancels their compiles and frees the
        worker; a disconnect raises APIError(499)."""
        count = sum(r.params.n for r in requests)
        if self.max_pending is not None and self.pending + count > self.max_pending:
            raise APIError(503, f"server busy: {self.pending} requests in flight, the limit is {self.max_pending}; "
                           "retry later", code="server_overloaded", headers={"Retry-After": "1"})
        self.pending += count
        loop = asyncio.get_running_loop()
        pool = self._compiles if any(r.params.constraint is not None for r in requests) else None
        gone = threading.Event()   # set when nobody waits for the submission any more
        job = loop.run_in_executor(pool, self._submit_all, requests, loop, gone)
        try:
            handles = await self._await_submission(job, http)
        except (asyncio.CancelledError, _ClientGone) as e:
            self.pending -= count
            gone.set()
            for r in requests:   # a compile under way stops at its next checkpoint
                self.engine.abort(r.rid)
            # requests queued anyway once the worker returns are aborted then
            job.add_done_callback(lambda f: f.cancelled() or f.exception() or
                                  [self.engine.abort(r.rid) for r in requests])
            if isinstance(e, _ClientGone):
                raise APIError(499, "client disconnected", code="client_closed_request") from None
            raise
        except RequestError:   # the handler names its param
            self.pending -= count
            raise
        except Exception as e:
            self.pending -= count
            raise _internal_error(e) from e
        return [RequestStream(self, r, h) for r, hs in zip(requests, handles) for h in hs]

    @staticmethod
    async def _await_submission(job: asyncio.Future, http: Request | None) -> list[list[Any]]:
        """The job's result; raises _ClientGone if `http`'s client disconnects first. The job is shielded: a
        worker thread cannot be interrupted, its compile is cancelled through the engine instead."""
        if http is None:
            return await asyncio.shield(job)
        watch = asyncio.ensure_future(_wait_disconnect(http))
        try:
            await asyncio.wait([job, watch], return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if not job.done():
            raise _ClientGone()
        return job.result()

    def _submit_all(self, requests: list[GenerateRequest], loop: asyncio.AbstractEventLoop,
                    gone: threading.Event) -> list[list[Any]]:
        handles: list[list[Any]] = []
        try:
            for r in requests:
                if gone.is_set():   # the caller left while this job waited for a worker: submit nothing more
                    break
                handles.append(self.engine.submit(r, loop))
        except BaseException:
            for r in requests[:len(handles)]:
                self.engine.abort(r.rid)
            raise
        return handles


async def collect(streams: list[RequestStream], request: Request) -> list[RequestStream]:
    """Waits for every stream to finish; aborts them all if the client disconnects first."""
    work = asyncio.ensure_future(asyncio.gather(*(s.finish() for s in streams)))
    watch = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait([work, watch], return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            raise APIError(499, "client disconnected", code="client_closed_request")
        return work.result()
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
            for s in streams:
                s.cancel()


async def _wait_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
