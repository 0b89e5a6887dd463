"""Scheduler: decides what each step computes.

A step decodes every running request (one pending token, or a few jump-forward tokens each) and prefills newly
admitted requests plus the next chunk of a long prompt, within a token budget and memory, in one forward pass
(mixed mode). With mixing off, prefill and decode steps alternate while both have work. Short of memory, the
newest requests are retracted and re-queued; they resume later from the prefix cache.

Requests with a slow grammar get a fair share of the steps, not all of them (grammar_share.GrammarShare): a
request without one is not held back by another's masks.

The Scheduler drives the drafter (propose before a decode, feedback and step timing after it) and, at the end of
each step, has the KVManager advance every request's K/V and release the finished ones.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any

import torch

from sglite.protocol import ABORT_BY_CLIENT, FinishReason

from .config import EngineConfig
from .grammar_share import GrammarShare
from .kv_manager import KVManager
from .request import Req, ScheduledBatch

# admission keeps this fraction of each admitted request's remaining output budget (capped) free for decode
DECODE_RESERVE_RATIO = 0.3
DECODE_RESERVE_CAP = 256
LPM_MAX_QUEUE = 128  # beyond this many waiting requests, LPM sorting costs more than it saves: use FCFS
# a mixed step pads every decode row to the longest prefill chunk (torch attention backend): mix only while
# decode rows x longest chunk stays under this many query rows, else prefill alone and decode the next step
MIX_PAD_ROWS = 4096


class Scheduler:
    def __init__(self, config: EngineConfig, kv: KVManager, drafter: Any = None):
        self.config = config
        self.kv = kv
        self.drafter = drafter              # speculative.NgramDrafter, or None
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []        # prompt fully computed; decoding. Admission order (oldest first)
        self.chunked: Req | None = None     # the one request whose prompt is being prefilled in chunks
        self._last_was_prefill = False
        self._skipped_decode = False
        self._step_started = 0.0            # perf_counter() when the current step's schedule() began
        self.grammar_share = GrammarShare()   # which slow-grammar requests a step leaves out
        self.num_retractions = 0

    # --- queue -----------------------------------------------------------------------------------------------
    def add(self, req: Req) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def abort(self, rid: str) -> list[Req]:
        """Removes every request with this id (or id prefix 'rid-' for n > 1) wherever it is, releasing its
        slots. Returns them with finish_reason abort."""
        def hit(r: Req) -> bool:
            return r.rid == rid or r.rid.startswith(rid + "-")
        out = [r for r in self.waiting if hit(r)] + [r for r in self.running if hit(r)]
        if self.chunked is not None and hit(self.chunked):
            out.append(self.chunked)
        return self.abort_all(out, FinishReason.abort(ABORT_BY_CLIENT, "aborted by request"))

    def abort_all(self, reqs: list[Req], reason: FinishReason, override: bool = False) -> list[Req]:
        """Finishes `reqs` (wherever they are: queued, running, or in a batch whose step failed) with `reason`,
        releasing what they hold; a request already finished keeps its own reason unless `override` (after a
        failed step, whose half-done results cannot be trusted). Returns reqs."""
        gone = set(reqs)
        self.waiting = deque(r for r in self.waiting if r not in gone)
        self.running = [r for r in self.running if r not in gone]
        if self.chunked in gone:
            self.chunked = None
        for r in reqs:
            self.grammar_share.forget(r)
            if r in self.kv.running:
                self.kv.release(r)
            if override or not r.finished:
                r.finish(reason)
        return reqs

    def flush_cache(self) -> bool:
        """Empties the prefix cache, and the drafter's memory of finished requests' outputs (text the cache held:
        drafts from it after a flush would copy what the cache no longer has). False (nothing done) while
        requests are running or queued."""
        if self.has_work() or not self.kv.flush():
            return False
        if self.drafter is not None:
            self.drafter.forget_outputs()
        return True

    # --- scheduling ------------------------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch | None:
        """Mixed mode (default when chunking): a step decodes all running requests and, in the same forward pass,
        prefills admitted requests, unless padding decode rows to a long chunk would cost more than it saves;
        then that prefill runs alone and the next step decodes. Without mixing, the two kinds alternate."""
        self._step_started = time.perf_counter()
        want_prefill = bool(self.waiting or self.chunked)
        self.grammar_share.start_step(
            self.running, want_prefill, bool(self.waiting) and len(self.running) < self.config.max_running_requests)
        mixed = self.config.enable_mixed_batch and self.config.chunked_prefill_size != -1
        if want_prefill and self.running and not mixed and self._last_was_prefill:
            want_prefill = False
        if want_prefill and self.running and mixed and self._skipped_decode:
            want_prefill = False  # the last step was a prefill without the running requests: decode now
        decode = None
        if self.running and (mixed or not want_prefill):
            decode = self._schedule_decode()  # running requests first: may retract the newest
        prefill = self._schedule_prefill() if want_prefill else None
        self._skipped_decode = False
        if prefill is not None and decode is not None and \
                len(decode.reqs) * max(prefill.extend_lens) > MIX_PAD_ROWS:
            # every decode row would be padded to the longest chunk: cheaper to prefill alone, decode next step
            self.kv.allocator.free(decode.out_cache_loc)  # fresh slots, not yet in any table
            for r in decode.reqs:
                r.spec.draft = []
            decode, self._skipped_decode = None, True
        if prefill is None and decode is None and self.grammar_share.sitting_out:
            self.grammar_share.sitting_out = set()   # nothing else could be scheduled: the slow ones run after all
        if prefill is None and decode is None and self.running:
            decode = self._schedule_decode()
        for r in (prefill.reqs if prefill else []) + (decode.reqs if decode else []):
            r.grammar_s = 0.0   # this step's grammar work is added by the masks and jump-forward
        self._last_was_prefill = prefill is not None
        if prefill is None or decode is None:
            return prefill or decode
        return ScheduledBatch(prefill.reqs + decode.reqs, prefill.extend_lens + decode.extend_lens,
                              torch.cat([prefill.out_cache_loc, decode.out_cache_loc]), len(prefill.reqs))

    def _schedule_prefill(self) -> ScheduledBatch | None:
        """Continues the chunked request, then admits waiting ones, within the token budget and memory. At most
        one request ends the step mid-prompt (it becomes `chunked`)."""
        budget = self.config.prefill_budget
        chunking = self.config.chunked_prefill_size != -1
        reqs, lens, slots = [], [], []
        reserve = sum(self._decode_reserve(r) for r in self.running)

        def take(req: Req, n: int) -> bool:
            got = self.kv.alloc(n)
            if got is None:
                return False
            reqs.append(req)
            lens.append(n)
            slots.append(got)
            return True

        if self.chunked is not None:
            req = self.chunked
            n = min(req.num_pending, budget)
            if not take(req, n):
                return None
            budget -= n
            reserve += self._decode_reserve(req)
            if n < req.num_pending:
                budget = 0
        adapters = self._adapters_running() | {r.lora_path for r in reqs if r.lora_path is not None}
        for req in self._ordered_waiting():
            if budget <= 0 or len(self.running) + len(reqs) >= self.config.max_running_requests:
                break
            if req.lora_path is not None and req.lora_path not in adapters:
                if len(adapters) >= self.config.max_loras_per_batch:
                    break   # its adapter waits for one of the batch's to finish (no one overtakes it meanwhile)
            if self._defer_for_sharing(req, reqs):
                continue
            if not self.kv.admit(req):
                break
            n = req.num_pending
            if n > budget and (chunking or reqs):
                n = budget if chunking else 0
            need = n + reserve + self._decode_reserve(req)
            if n == 0 or need > self.kv.available or not take(req, n):
                self.kv.release(req)
                break
            self.waiting.remove(req)
            if req.lora_path is not None:
                adapters.add(req.lora_path)
            if not req.admitted_once:
                req.cache_hit_tokens, req.admitted_once = req.kv.shared_len, True
            budget -= n
            reserve += self._decode_reserve(req)
            if n < req.num_pending:
                break  # it continues as the chunked request
        if not reqs:
            return None
        return ScheduledBatch(reqs, lens, torch.cat(slots), len(reqs))

    def _ordered_waiting(self) -> list[Req]:
        reqs = list(self.waiting)
        if self.config.schedule_policy == "lpm" and self.kv.cache is not None and 1 < len(reqs) <= LPM_MAX_QUEUE:
            reqs.sort(key=lambda r: -self.kv.match_len(r))  # stable: FCFS among equal matches
        return reqs

    def _adapters_running(self) -> set[str]:
        """The LoRA adapters of the requests that hold K/V (running or mid-prompt): every step computes them all,
        so admission keeps their number within max_loras_per_batch."""
        held = self.running + ([self.chunked] if self.chunked is not None else [])
        return {r.lora_path for r in held if r.lora_path is not None}

    def _defer_for_sharing(self, req: Req, admitted: list[Req]) -> bool:
        """True if req shares a long uncached prefix with a request prefilled this step: it waits one step and
        then reads that prefix from the cache instead of computing it again."""
        if self.kv.cache is None:
            return False
        cached = self.kv.match_len(req)
        limit = req.max_cacheable_prefix()
        for other in admitted:
            if other.lora_uid != req.lora_uid:
                continue    # K/V under another adapter is not shared
            common = _common_prefix_len(req.tokens(0, limit), other.tokens(0, other.prompt_len))
            if common - cached >= self.config.in_batch_prefix_threshold:
                return True
        return False

    def _decode_reserve(self, req: Req) -> int:
        return int(min(req.remaining_new_tokens, DECODE_RESERVE_CAP) * DECODE_RESERVE_RATIO)

    def _decoding(self) -> list[Req]:
        out = self.grammar_share.sitting_out
        return [r for r in self.running if r not in out] if out else list(self.running)

    def _schedule_decode(self) -> ScheduledBatch | None:
        """Slots for the pending tokens and draft of every running request not sitting out (fair share). Short
        of memory, drops the drafts, then retracts the newest requests: a half-prefilled chunked request first,
        then running ones, newest first (one always survives). None if every running request sits out."""
        if not self._decoding():
            return None
        if self.drafter is not None:
            self.drafter.propose_all(self._decoding())
        while True:
            reqs = self._decoding()
            need = sum(r.num_pending + len(r.spec.draft) for r in reqs)
            slots = self.kv.alloc(need)
            if slots is not None:
                break
            if any(r.spec.draft for r in reqs):
                for r in reqs:
                    r.spec.draft = []
            elif self.chunked is not None:
                self._retract(self.chunked)
                self.chunked = None
            elif len(self.running) > 1:
                self._retract(self.running.pop())
            else:
                raise RuntimeError(f"KV pool too small for one request ({self.running[0]}); raise max_total_tokens")
        if not reqs:   # every request that was to decode was retracted
            return None
        return ScheduledBatch(reqs, [r.num_pending + len(r.spec.draft) for r in reqs], slots, 0)

    def _retract(self, req: Req) -> None:
        """Preempts req: its computed K/V goes to the cache (evictable), it re-queues at the front and later
        resumes from its prompt plus the output so far."""
        req.spec.draft = []
        self.kv.release(req)
        self.waiting.appendleft(req)
        self.num_retractions += 1

    # --- after a step ----------------------------------------------------------------------------------------
    def finish_step(self, batch: ScheduledBatch) -> list[Req]:
        """After the batch's forward pass was processed: advances each request's K/V
        past what the pass computed (freeing rejected draft slots), tells the drafter how its drafts and the step
        did, releases finished requests, moves completed prefills to running and shares their fresh prompt K/V
        through the cache. Returns the finished requests."""
        for r, n in zip(batch.reqs, batch.extend_lens):
            s = r.spec
            rejected = len(s.draft) - s.accepted
            self.kv.advance(r, n - rejected, rejected)
            if s.draft:
                self.drafter.feedback(r, len(s.draft), s.accepted)
                s.draft, s.accepted = [], 0
        if self.drafter is not None and not batch.num_prefill:
            self.drafter.observe_step(batch.num_tokens, time.perf_counter() - self._step_started)
        finished = [r for r in batch.reqs if r.finished]
        for r in finished:
            if self.drafter is not None:
                self.drafter.on_finished(r)
            self.kv.release(r)
        if batch.num_prefill:
            self.chunked = None
            for r in batch.reqs[:batch.num_prefill]:
                if r.finished:
                    continue
                self.kv.cache_unfinished(r)
                if r.in_prompt:
                    self.chunked = r
                else:
                    self.running.append(r)
        if finished:
            self.running = [r for r in self.running if not r.finished]
        self.grammar_share.end_step(batch.reqs, self.running, bool(self.waiting or self.chunked),
                                    time.perf_counter() - self._step_started)
        return finished


def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on slice equality keeps the comparison in C
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
