"""Engine: the offline API (SGLang's shape). Callers on any thread submit requests; one loop (a background thread,
or the calling thread when background=False) runs schedule -> forward -> process steps over all of them."""
from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import traceback
import uuid
from queue import SimpleQueue
from typing import Any, AsyncIterator, Callable, Iterator

import torch

from ..threads import release_openmp_pool
from .config import EngineConfig
from .grammar import GrammarBackend
from .grammar_masks import MaskPrefetcher
from .handle import END, RequestHandle
from .kv_manager import KVManager
from .model_runner import ModelRunner
from .output import build_output
from .processor import StepProcessor
from .request import FinishReason, Req, ReqStatus
from .sampler import Sampler
from .scheduler import Scheduler
from .stop import StopChecker
from .tokenizer_input import normalize_inputs

logger = logging.getLogger(__name__)
DEFAULT_KV_BYTES = 2 << 30  # default pool size when max_total_tokens is None


class Engine:
    def __init__(self, model: Any = None, **options: Any):
        from ..model import Model, load_model
        from ..weight_plan import WeightPlan

        self.config = cfg = EngineConfig.from_kwargs(**options)
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        if isinstance(model, Model):
            if cfg.weights != "auto" and model.net.plan != WeightPlan.parse(cfg.weights):
                raise ValueError(f"Engine(weights={cfg.weights!r}) was given a Model loaded with weights "
                                 f"{str(model.net.plan)!r}; load it with load_model(weights={cfg.weights!r}) or "
                                 "pass the model path instead")
            self.model = model
        else:
            self.model = load_model(model, device=cfg.device, attention_backend=cfg.attention_backend,
                                    weights=cfg.weights)
        self.tokenizer = self.model.tokenizer
        device = str(self.model.net.device)  # a passed-in Model decides the device
        mc = self.model.config
        self.max_context = min(cfg.max_context or mc.max_context, mc.max_context)
        pool_tokens = cfg.max_total_tokens
        if pool_tokens is None:
            per_slot = 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * self.model.net.dtype.itemsize
            pool_tokens = min(cfg.max_running_requests * self.max_context, DEFAULT_KV_BYTES // per_slot)
        self.pool_tokens = pool_tokens
        self.kv = KVManager(pool_tokens + 1, cfg.max_running_requests, self.max_context, device,
                            cfg.disable_radix_cache)
        self.runner = ModelRunner(self.model, pool_tokens + 1, cfg.attention_backend, device)
        self.grammar = GrammarBackend(self.tokenizer, cfg.json_whitespace, cfg.json_property_order)
        eos = self.tokenizer.eos_token_id
        self.processor = StepProcessor(Sampler(mc.vocab_size, eos), eos,
                                       self.grammar.jump_forward if cfg.enable_jump_forward else None)
        self.scheduler = Scheduler(cfg, self.kv)
        self.masks = MaskPrefetcher(mc.vocab_size, cfg.grammar_mask_overlap, device)
        self.debug_checks = False   # tests set True: check_integrity after every step
        self._stats = {"prompt_tokens": 0, "cached_tokens": 0, "prefill_tokens_computed": 0,
                       "decode_tokens": 0, "requests_finished": 0}
        self._handles: dict[Req, RequestHandle] = {}
        self._inbox: SimpleQueue[Callable[[], None]] = SimpleQueue()
        self._wake = threading.Event()
        self._drive_lock = threading.Lock()
        self._counter = itertools.count()
        self._closing = False   # shutdown() began: no new requests
        self._stopped = False   # the loop has been told to exit
        self._thread = None
        if cfg.background:
            if self.model.net.device.type == "cpu":
                release_openmp_pool()   # the loop thread's torch ops run at full speed (see runtime/threads.py)
            self._thread = threading.Thread(target=self._loop, name="sglite-engine", daemon=True)
            self._thread.start()

    # --- public API ------------------------------------------------------------------------------------------
    def generate(self, prompt: Any = None, sampling_params: Any = None, input_ids: Any = None,
                 return_logprob: bool = False, logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                 stream: bool = False) -> dict | list[dict] | Iterator[dict]:
        handles, single = self._submit(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                       top_logprobs_num, stream, aloop=None)
        if stream:
            return self._stream(handles[0])
        results = [self._wait(h) for h in handles]
        return results[0] if single and len(results) == 1 else results

    async def async_generate(self, prompt: Any = None, sampling_params: Any = None, input_ids: Any = None,
                             return_logprob: bool = False, logprob_start_len: int | None = None,
                             top_logprobs_num: int = 0, stream: bool = False) -> dict | list[dict] | AsyncIterator[dict]:
        """Like generate; with stream=True returns an async iterator of chunks. Needs background=True."""
        if self._thread is None:
            raise ValueError("async_generate needs Engine(background=True)")
        handles, single = self._submit(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                       top_logprobs_num, stream, aloop=asyncio.get_running_loop())
        if stream:
            return self._astream(handles[0])
        results = []
        for h in handles:
            while await h.aget() is not END:
                pass
            results.append(h.result)
        return results[0] if single and len(results) == 1 else results

    def abort(self, request_id: str) -> None:
        """Aborts the request (all n samples of it) wherever it is; its slots are freed. Unknown ids are ignored."""
        self._call(lambda: self._deliver_all(self.scheduler.abort(request_id)), wait=False)

    def flush_cache(self) -> bool:
        """Empties the prefix cache. False (nothing done) while requests are running or queued."""
        return self._call(lambda: not self.scheduler.has_work() and self.kv.flush(), wait=True)

    def get_stats(self) -> dict[str, Any]:
        s = dict(self._stats)
        s["cache_hit_rate"] = s["cached_tokens"] / s["prompt_tokens"] if s["prompt_tokens"] else 0.0
        s["forward_passes"] = self.runner.forward_passes
        s["num_retractions"] = self.scheduler.num_retractions
        s["num_running"] = len(self.scheduler.running) + (self.scheduler.chunked is not None)
        s["num_waiting"] = len(self.scheduler.waiting)
        s["pool_tokens"] = self.pool_tokens
        s["pool_free_tokens"] = self.kv.allocator.available
        s["cached_tree_tokens"] = self.kv.cache.total_size if self.kv.cache else 0
        return s

    def shutdown(self) -> None:
        """Stops the loop; requests still in flight finish with reason abort."""
        if self._closing:
            return
        self._closing = True  # new submissions fail from here on
        self._call(self._abort_all, wait=True)
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._drive_lock:  # a submission that raced with closing: enqueue it, then abort it
            self._drain_inbox()
            self._abort_all()
        self.masks.shutdown()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # --- submission ------------------------------------------------------------------------------------------
    def _submit(self, prompt, sampling_params, input_ids, return_logprob, logprob_start_len, top_logprobs_num,
                stream, aloop) -> tuple[list[RequestHandle], bool]:
        if self._closing:
            raise RuntimeError("the engine is shut down")
        if not isinstance(top_logprobs_num, int) or top_logprobs_num < 0:
            raise ValueError(f"top_logprobs_num must be an int >= 0, got {top_logprobs_num!r}")
        if logprob_start_len is not None and not isinstance(logprob_start_len, int):
            raise ValueError(f"logprob_start_len must be an int or None, got {logprob_start_len!r}")
        specs, single = normalize_inputs(self.tokenizer, prompt, input_ids, sampling_params,
                                         vocab_size=self.model.config.vocab_size, max_context=self.max_context,
                                         pool_tokens=self.pool_tokens)
        grammars = [self.grammar.compile(s.params) for s in specs]  # ValueError before anything is queued
        reqs: list[Req] = []
        for spec, grammar in zip(specs, grammars):
            base = uuid.uuid4().hex
            p = spec.params
            for i in range(p.n):
                seed = p.seed + i if p.seed is not None else hash((self.config.seed, next(self._counter))) % 2**62
                reqs.append(Req(base if p.n == 1 else f"{base}-{i}", spec.input_ids, p,
                                return_logprob=return_logprob, logprob_start_len=logprob_start_len,
                                top_logprobs_num=top_logprobs_num,
                                generator=None if p.is_greedy else torch.Generator().manual_seed(seed),
                                matcher=grammar.matcher() if grammar is not None else None,
                                stop_checker=StopChecker(self.tokenizer, p.stop, p.skip_special_tokens,
                                                         p.no_stop_trim)))
        if stream and len(reqs) != 1:
            raise ValueError("stream=True takes a single prompt with n=1")
        handles = [RequestHandle(r.rid, stream, aloop) for r in reqs]

        def enqueue() -> None:
            for r, h in zip(reqs, handles):
                self._handles[r] = h
                self.scheduler.add(r)
        self._call(enqueue, wait=False)
        return handles, single

    def _wait(self, h: RequestHandle) -> dict:
        while not h.done.is_set():
            if self._thread is not None:
                h.done.wait()
            else:
                self._drive_once()
        return h.result

    def _stream(self, h: RequestHandle) -> Iterator[dict]:
        while True:
            if self._thread is None:
                while not h.has_items():
                    self._drive_once()
            item = h.get()
            if item is END:
                return
            yield item

    async def _astream(self, h: RequestHandle) -> AsyncIterator[dict]:
        while (item := await h.aget()) is not END:
            yield item

    # --- the loop --------------------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Any], wait: bool) -> Any:
        """Runs fn on the loop thread (or inline when there is no loop thread)."""
        if self._thread is None or threading.current_thread() is self._thread:
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

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.clear()
            self._drain_inbox()
            if not self.scheduler.has_work():
                self._wake.wait()
                continue
            self._step()

    def _drive_once(self) -> None:
        with self._drive_lock:
            self._step()

    def _drain_inbox(self) -> None:
        while not self._inbox.empty():
            self._inbox.get()()

    def _step(self) -> None:
        """One schedule -> forward -> process step. An internal error aborts the in-flight requests (with the
        error as message) and leaves the engine usable."""
        try:
            batch = self.scheduler.schedule()
            if batch is None:
                if self.scheduler.has_work():
                    raise RuntimeError("scheduler made no progress with requests pending")
                return
            pending = self.masks.start(batch.reqs, batch.extend_lens)   # built while the forward runs
            out = self.runner.forward(batch, self.kv.req_to_token.table)
            self.processor.process(batch, out, pending.result() if pending is not None else None)
            self._stats["prefill_tokens_computed"] += batch.num_prefill_tokens
            self._stats["decode_tokens"] += batch.num_tokens - batch.num_prefill_tokens
            finished = self.scheduler.on_step_done(batch)
            if self.debug_checks:
                self.kv.check_integrity()
            self._deliver_all([r for r in batch.reqs if r.finished or r.output_ids])
            self._stats["requests_finished"] += len(finished)
        except Exception as e:
            logger.error("engine step failed:\n%s", traceback.format_exc())
            self._abort_all(f"internal error: {type(e).__name__}: {e}")

    def _abort_all(self, message: str = "engine shut down") -> None:
        """Finishes every queued and running request with reason abort. After an internal error (message given
        by _step) the KV state is rebuilt from scratch, since a failed step may have left it half-updated."""
        reqs = list(self._handles)  # every request not yet delivered, wherever a failed step left it
        if message.startswith("internal error"):
            self.kv.reset()
        for r in reqs:
            if r.status is ReqStatus.RUNNING and r in self.kv.running:
                self.kv.release(r)
            r.status = ReqStatus.FINISHED
            if not r.finished or message.startswith("internal error"):
                r.finish_reason = FinishReason("abort", message=message)
        self.scheduler.waiting.clear()
        self.scheduler.running.clear()
        self.scheduler.chunked = None
        self._deliver_all(reqs)

    def _deliver_all(self, reqs: list[Req]) -> None:
        for r in reqs:
            h = self._handles.get(r)
            if h is None:
                continue
            if r.finished:
                self._stats["cached_tokens"] += r.cached_tokens
                self._stats["prompt_tokens"] += r.prompt_len
                del self._handles[r]
            if h.stream:
                chunk = build_output(r, self.tokenizer, text=r.stop_checker.stream_delta(final=r.finished),
                                     logprobs_from=h.logprobs_sent, input_logprobs=not h.sent_input_logprobs)
                if chunk["text"] or r.finished:  # no empty chunks (e.g. half a UTF-8 character so far)
                    h.logprobs_sent, h.sent_input_logprobs = len(r.output_token_logprobs), True
                    h.push(chunk)
            if r.finished:
                h.finish(build_output(r, self.tokenizer, text=r.stop_checker.text))
