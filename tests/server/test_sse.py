"""Unit tests of the SSE helpers: keep-alive while a stream is quiet, and JSON that stays valid."""
from __future__ import annotations

import asyncio
import json

from sglite.protocol import StreamChunk
from sglite.server.sse import IDLE, dumps, merge_chunks


class _SlowStream:
    def __init__(self, delay: float, n: int):
        self.delay, self.n = delay, n

    async def chunks(self):
        for k in range(self.n):
            await asyncio.sleep(self.delay)
            yield StreamChunk("r", str(k), (k,))


def test_merge_chunks_idles_then_interleaves():
    async def run():
        streams = [_SlowStream(0.2, 1), _SlowStream(0.25, 1)]
        return [(i, c.text_delta if c else None) async for i, c in merge_chunks(streams, idle_s=0.05)]
    out = asyncio.run(run())
    assert out[0] == (IDLE, None)
    real = [x for x in out if x[0] != IDLE]
    assert real == [(0, "0"), (0, None), (1, "0"), (1, None)]


def test_dumps_never_writes_infinity():
    text = dumps({"lp": float("-inf"), "top": [(float("nan"), 3, "x")]})
    assert json.loads(text) == {"lp": -9999.0, "top": [[None, 3, "x"]]}
