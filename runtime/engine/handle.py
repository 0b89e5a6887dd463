"""RequestHandle: the caller's side of a submitted request. The loop thread pushes stream chunks and the final
result; a caller thread waits on it, or an asyncio task awaits it (items cross threads through the event loop)."""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

END = object()  # pushed after the last item


class RequestHandle:
    def __init__(self, rid: str, stream: bool, aloop: asyncio.AbstractEventLoop | None = None):
        self.rid = rid
        self.stream = stream
        self.result: dict | None = None
        self.done = threading.Event()
        self.logprobs_sent = 0           # output logprobs already in stream chunks
        self.sent_input_logprobs = False
        self._aloop = aloop
        self._queue: Any = asyncio.Queue() if aloop is not None else queue.Queue()

    def push(self, item: Any) -> None:
        """Loop thread: hands a chunk (or END) to the waiting caller."""
        if self._aloop is not None:
            self._aloop.call_soon_threadsafe(self._queue.put_nowait, item)
        else:
            self._queue.put(item)

    def finish(self, result: dict) -> None:
        """Loop thread: the final result; wakes the caller."""
        self.result = result
        self.done.set()
        self.push(END)

    def has_items(self) -> bool:
        return not self._queue.empty()

    def get(self, timeout: float | None = None) -> Any:
        """Caller thread: next item (a chunk or END); raises queue.Empty on timeout."""
        return self._queue.get(timeout=timeout)

    async def aget(self) -> Any:
        return await self._queue.get()
