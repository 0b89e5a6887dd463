"""EngineLoop: runs an EngineCore and routes its StreamChunks to RequestHandles.

Threaded (the default): one daemon thread owns the core; callers on any thread hand it work through an inbox
(`call`) and read their handles. Inline (`threaded=False`): no thread; whichever caller waits on an empty handle
steps the core itself, under a lock. This class is the only place the two models differ."""
from __future__ import annotations

import asyncio
import logging
import threading
from queue import SimpleQueue
from typing import Any, Callable

from sglite.protocol import RequestError, StreamChunk

from ..threads import release_openmp_pool
from .core import EngineCore
from .handle import RequestHandle
from .request import Req

logger = logging.getLogger(__name__)


class EngineLoop:
    def __init__(self, core: EngineCore, threaded: bool = True):
        self.core = core
        self._handles: dict[str, RequestHandle] = {}
        self._handles_lock = threading.Lock()   # callers register handles; the loop unregisters them
        self._inbox: SimpleQueue[Callable[[], None]] = SimpleQueue()
        self._wake = threading.Event()
        self._drive_lock = threading.Lock()     # inline: one caller steps the core at a time
        self._stopped = False
        self._thread: threading.Thread | None = None
        if threaded:
            if core.model.net.device.type == "cpu":
                release_openmp_pool()   # the loop thread's torch ops run at full speed (see runtime/threads.py)
            self._thread = threading.Thread(target=self._run, name="sglite-engine", daemon=True)
            self._thread.start()

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def submit(self, reqs: list[Req], aloop: asyncio.AbstractEventLoop | None = None) -> list[RequestHandle]:
        """Queues validated Reqs (EngineCore.make_reqs); returns their handles. Does not wait for the loop."""
        if aloop is not None and not self.threaded:
            raise RequestError(None, "invalid_value", "async requests need Engine(background=True)")
        pump = None if self.threaded else self._pump
        handles = [RequestHandle(r.rid, r.lp.wanted, aloop, pump) for r in reqs]
        with self._handles_lock:
            taken = [r.rid for r in reqs if r.rid in self._handles]
            if taken:
                raise RequestError("rid", "invalid_value", f"request id {taken[0]!r} is already in flight")
            self._handles.update((h.rid, h) for h in handles)
        self.call(lambda: self.core.add(reqs), wait=False)
        return handles

    def abort(self, rid: str) -> None:
        self.call(lambda: self._route(self.core.abort(rid)), wait=False)

    def call(self, fn: Callable[[], Any], wait: bool) -> Any:
        """Runs fn on the core's thread (inline: right here). With wait, returns its result."""
        if not self.threaded or threading.current_thread() is self._thread:
            with self._drive_lock:
                return fn()
        box: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                box.append(fn())
            finally:
                done.set()
        self._inbox.put(run)
        self._wake.set()
        if wait:
            done.wait()
            return box[0] if box else None
        return None

    def shutdown(self) -> None:
        """Aborts every request in flight (reason: shutdown) and stops the thread."""
        self.call(lambda: self._route(self.core.abort_all()), wait=True)
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._drive_lock:   # a submission that raced with the stop: run it, then abort it
            self._drain_inbox()
            self._route(self.core.abort_all())
        self.core.shutdown()

    # --- the core's thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped:
            self._wake.clear()
            self._drain_inbox()
            if not self.core.has_work():
                self._wake.wait()
                continue
            self._route(self.core.step())

    def _pump(self) -> None:
        """Inline: one step, by the waiting caller."""
        with self._drive_lock:
            if not self.core.has_work():
                raise RuntimeError("the engine has no work left but a request has not finished")
            self._route(self.core.step())

    def _drain_inbox(self) -> None:
        while not self._inbox.empty():
            fn = self._inbox.get()
            try:
                fn()
            except Exception:   # a bad call must not stop the loop that every other request depends on
                logger.exception("engine call failed")

    def _route(self, chunks: list[StreamChunk]) -> None:
        for chunk in chunks:
            with self._handles_lock:
                handle = self._handles.pop(chunk.rid) if chunk.finished else self._handles.get(chunk.rid)
            if handle is not None:
                handle.push(chunk)
