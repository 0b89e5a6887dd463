"""Grammar masks for one step, built while the forward pass runs.

A request's grammar state is final once the previous step has been processed (sampled token and jump-forward
tokens consumed), so the masks of the requests that will sample in this step can be built on a worker thread
while the model computes the logits; the sampler then only applies them. The forward pass spends nearly all its
time in torch ops that release the GIL, so the mask work (Python) overlaps it, given a core to run on: on a CPU
whose cores all run torch's threads, a busy extra thread stalls every parallel op of the forward pass (each
waits for its descheduled worker), so there "auto" builds the masks inline instead."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import torch

from ..threads import usable_cores
from .request import Req


class GrammarMasks:
    """int32 [len(reqs), ceil(vocab/32)] bitmask for `reqs` (bit j of word w: token 32w+j allowed), EOS exactly
    where the request's grammar accepts (the matcher's `fill_next_token_bitmask` contract)."""

    def __init__(self, reqs: Sequence[Req], bitmask: torch.Tensor):
        self.reqs = list(reqs)
        self.bitmask = bitmask

    @staticmethod
    def build(reqs: Sequence[Req], vocab_size: int) -> "GrammarMasks":
        """Adds the seconds each request's mask took to its `grammar_s` (the Scheduler's fair share reads it)."""
        bitmask = torch.zeros((len(reqs), (vocab_size + 31) // 32), dtype=torch.int32)
        for j, r in enumerate(reqs):
            t0 = time.perf_counter()
            budget = r.remaining_new_tokens if r.params.close_at_budget else None
            r.matcher.fill_next_token_bitmask(bitmask, j, budget=budget)
            r.grammar_s += time.perf_counter() - t0
        return GrammarMasks(reqs, bitmask)

    def rows_for(self, reqs: Sequence[Req]) -> torch.Tensor | None:
        """The bitmask rows of `reqs` (each must be one of ours), or None if some request is not covered."""
        at = {id(r): j for j, r in enumerate(self.reqs)}
        rows = [at.get(id(r)) for r in reqs]
        if any(j is None for j in rows):
            return None
        return self.bitmask[rows]


class MaskPrefetcher:
    """Starts `GrammarMasks.build` for a step's sampling requests on one worker thread. `mode`: "on", "off", or
    "auto" (on when the model runs on an accelerator, or torch leaves a CPU core free)."""

    def __init__(self, vocab_size: int, mode: str = "auto", device: str = "cpu"):
        self.vocab_size = vocab_size
        self.mode = mode
        self.device = device
        self._pool: ThreadPoolExecutor | None = None

    def overlapping(self) -> bool:
        if self.mode != "auto":
            return self.mode == "on"
        if not self.device.startswith("cpu"):
            return True
        return torch.get_num_threads() < usable_cores()

    def start(self, reqs: Sequence[Req], extend_lens: Sequence[int]) -> Future | None:
        """Masks for the requests of a scheduled step that have a grammar and will sample in it (their pass
        reaches the end of their tokens). None when there are none or not overlapping (the sampler then builds
        them)."""
        if not self.overlapping():
            return None
        todo = [r for r, n in zip(reqs, extend_lens)
                if r.matcher is not None and n == r.num_pending and r.params.max_new_tokens > 0]
        if not todo:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sglite-masks")
        return self._pool.submit(GrammarMasks.build, todo, self.vocab_size)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
