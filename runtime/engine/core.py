"""EngineCore: the engine as one synchronous, single-threaded object.

    core = EngineCore(model, EngineConfig())
    core.add(GenerateRequest(input_ids=[...], params=SamplingParams(max_new_tokens=8)))
    while core.has_work():
        for chunk in core.step():     # StreamChunks: what the step added to each request
            ...

A step is schedule -> run (the forward pass) -> process (sample, append, decide who ends) -> finish (the scheduler
advances the K/V and releases the finished) -> deliver. Nothing here starts a thread or waits for one;
`EngineLoop` runs a core on a thread of its own and routes its chunks to callers. Every method except
`make_reqs` must be called from one thread at a time (the loop's); `make_reqs` (validation, tokenization,
grammar compilation) is safe from any thread, so callers pay for it and the loop never does.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import traceback
from typing import Any

import torch

from sglite.kernels import registry
from sglite.protocol import ABORT_INTERNAL, ABORT_SHUTDOWN, FinishReason, GenerateRequest, RequestError, StreamChunk

from ..constrained.budget import CompileBudget
from ..kv_pool import KVPool
from .config import EngineConfig
from .grammar_backend import GrammarBackend
from .grammar_masks import MaskPrefetcher
from .kv_manager import KVManager
from .model_runner import ModelRunner
from .output import take_chunk
from .processor import StepProcessor
from .request import Req, ScheduledBatch
from .sampler import Sampler
from .scheduler import Scheduler
from .speculative import NgramDrafter
from .stop import StopChecker

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, model: Any, config: EngineConfig):
        self.config = cfg = config
        self.model = model
        self.tokenizer = model.tokenizer
        device = str(model.net.device)  # the model decides the device
        mc = model.config
        self.vocab_size = mc.vocab_size
        self.max_context = min(cfg.max_context or mc.max_context, mc.max_context)
        pool_tokens = cfg.max_total_tokens
        if pool_tokens is None:
            per_slot = KVPool.token_bytes(mc.num_layers, mc.num_kv_heads, mc.head_dim, model.net.dtype,
                                          cfg.kv_cache_dtype)
            pool_tokens = min(cfg.max_running_requests * self.max_context, cfg.kv_cache_bytes // per_slot - 1)   # + slot 0
        self.pool_tokens = pool_tokens
        self.kv = KVManager(pool_tokens + 1, cfg.max_running_requests, self.max_context, device,
                            cfg.disable_radix_cache)
        self.lora = self._lora_manager(mc, cfg)     # the adapters requests may name (maybe none yet)
        self.runner = ModelRunner(model, pool_tokens + 1, cfg.attention_backend, device, cfg.batch_invariant,
                                  lora=self.lora, kv_cache_dtype=cfg.kv_cache_dtype)
        self.grammar = GrammarBackend(self.tokenizer, cfg.json_whitespace, cfg.json_property_order,
                                      CompileBudget(seconds=cfg.grammar_compile_budget_s), cfg.grammar_cache_bytes)
        self.drafter = NgramDrafter(cfg.speculative_num_draft_tokens, cfg.speculative_row_cost) \
            if cfg.speculative_algorithm == "ngram" else None
        self.scheduler = Scheduler(cfg, self.kv, self.drafter)
        eos = self.tokenizer.eos_token_id
        self.processor = StepProcessor(Sampler(mc.vocab_size, eos, self.tokenizer.all_token_bytes), eos,
                                       self.grammar.jump_forward if cfg.enable_jump_forward else None)
        self.masks = MaskPrefetcher(mc.vocab_size, cfg.grammar_mask_overlap, device)
        self.debug_checks = False   # tests set True: check_integrity after every step
        self.active: dict[str, Req] = {}   # every added request not yet finished, by rid
        self.stats = {"prompt_tokens": 0, "cached_tokens": 0, "prefill_tokens_computed": 0,
                      "decode_tokens": 0, "requests_finished": 0}
        self._counter = itertools.count()

    @staticmethod
    def _lora_manager(mc: Any, cfg: EngineConfig):
        """A LoraManager with every adapter of cfg.lora_paths loaded (LoraError names the one that fails)."""
        from ..lora import LoraManager

        manager = LoraManager(mc, cfg.max_loras_per_batch)
        for name, path in cfg.lora_paths:
            manager.load(name, path)
        return manager

    # --- LoRA adapters ---------------------------------------------------------------------------------------
    def lora_names(self) -> list[str]:
        """The adapters requests may name (lora_path=NAME), in load order."""
        return self.lora.names()

    def load_lora_adapter(self, name: str, path: str) -> None:
        """Loads an adapter under `name`; running requests are untouched. Raises LoraError (a ValueError) naming
        the problem: a missing or malformed adapter, one that does not fit the base, a name already loaded.
        Thread-safe: the adapter is read and checked on the caller's thread."""
        self.lora.load(name, path)

    def unload_lora_adapter(self, name: str) -> None:
        """Forgets adapter `name`. Raises LoraError if no adapter has that name, LoraInUseError while requests
        queued or running hold it (they keep it until they finish; unload again then). Its prefix-cache entries
        are never matched again (a later load gets a new namespace) and age out of the cache."""
        self.lora.unload(name)

    def _acquire_lora(self, request: GenerateRequest):
        """request.lora_path's adapter, held once per sample (each released as its sample finishes), or None for
        the base. Raises RequestError (404 over HTTP) for a name that is not loaded."""
        if request.lora_path is None:
            return None
        from ..lora import LoraError

        held = []
        try:
            for _ in range(request.params.n):
                held.append(self.lora.acquire(request.lora_path))
        except LoraError:
            for a in held:
                self.lora.release(a)
            raise RequestError("lora_path", "not_found",
                               f"no LoRA adapter named {request.lora_path!r} is loaded; loaded: "
                               f"{self.lora_names() or 'none'} (load it with --lora-paths NAME=PATH or "
                               "load_lora_adapter)") from None
        return held[0]

    def release_reqs(self, reqs: list[Req]) -> None:
        """Gives back what make_reqs took for Reqs that will never be added (a later request of their batch
        failed validation)."""
        for r in reqs:
            if r.lora is not None:
                self.lora.release(r.lora)
                r.lora = None

    # --- requests --------------------------------------------------------------------------------------------
    def make_reqs(self, request: GenerateRequest) -> list[Req]:
        """The request's n samples as Reqs, validated: raises RequestError (nothing queued) on a bad prompt, a
        request that cannot fit, an unknown LoRA adapter, or a grammar that does not compile. Thread-safe. Each
        Req holds its adapter (LoraManager.acquire) until it finishes or is given to `release_reqs`."""
        if request.lora_path is not None and request.lora_path not in self.lora:
            self._acquire_lora(request)      # raises: an unknown adapter, before any other work
        ids = self._prompt_ids(request)
        p = self._fit(request.params, len(ids))
        p.check_vocab(self.vocab_size)
        grammar = self.grammar.compile(p, request.rid)   # Engine.abort(rid) cancels it
        adapter = self._acquire_lora(request)     # last: nothing after it raises
        reqs = []
        for i, rid in enumerate(request.sample_ids()):
            # unseeded: distinct per sample, reproducible per engine seed and submission order (int hashes
            # are not randomized per process)
            seed = p.seed + i if p.seed is not None else hash((self.config.seed, next(self._counter))) % 2**62
            reqs.append(Req(rid, ids, p, return_logprob=request.return_logprob,
                            logprob_start_len=request.logprob_start_len, top_logprobs_num=request.top_logprobs_num,
                            return_constrained_logprob=request.return_constrained_logprob,
                            generator=None if p.is_greedy else self._generator(seed),
                            matcher=grammar.matcher() if grammar is not None else None,
                            stop_checker=StopChecker(self.tokenizer, p.stop, p.skip_special_tokens, p.no_stop_trim,
                                                     p.stop_regex),
                            lora=adapter))
        return reqs

    def _generator(self, seed: int) -> torch.Generator:
        """A request's own random stream, on the device its logits are sampled on."""
        return torch.Generator(device=self.runner.device).manual_seed(seed)

    def add(self, request: GenerateRequest | list[Req]) -> list[Req]:
        """Queues a request (or Reqs made by make_reqs). Returns its Reqs."""
        reqs = self.make_reqs(request) if isinstance(request, GenerateRequest) else request
        for r in reqs:
            if r.rid in self.active:
                raise RequestError("rid", "invalid_value", f"request id {r.rid!r} is already in flight")
        for r in reqs:
            self.active[r.rid] = r
            self.scheduler.add(r)
        return reqs

    def abort(self, rid: str) -> list[StreamChunk]:
        """Aborts the request (every sample of it) wherever it is; returns their final chunks. Unknown ids
        (already finished, or never added) are ignored."""
        return self._deliver(self.scheduler.abort(rid))

    def abort_all(self, internal_error: str | None = None) -> list[StreamChunk]:
        """Finishes every request in flight with reason abort: shutdown, or (with `internal_error`) a failed step,
        after which the KV state is rebuilt from scratch since the step may have left it half-updated."""
        reqs = list(self.active.values())
        if internal_error is not None:
            self.kv.reset()
            reason = FinishReason.abort(ABORT_INTERNAL, f"internal error: {internal_error}")
        else:
            reason = FinishReason.abort(ABORT_SHUTDOWN, "engine shut down")
        self.scheduler.abort_all(reqs, reason, override=internal_error is not None)
        return self._deliver(reqs)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def flush_cache(self) -> bool:
        """Empties the prefix cache, and the drafter's memory of finished requests' outputs (text the cache held:
        drafts from it after a flush would copy what the cache no longer has). False (nothing done) while
        requests are running or queued."""
        return self.scheduler.flush_cache()

    # --- the step --------------------------------------------------------------------------------------------
    def step(self) -> list[StreamChunk]:
        """One schedule -> run -> process -> finish step. Returns a chunk for every request that gained text or
        finished. An internal error aborts the requests in flight (each gets a final chunk saying so) and leaves
        the core usable."""
        try:
            batch = self.scheduler.schedule()
            if batch is None:
                return self._idle()
            masks = self.masks.start(batch.reqs, batch.extend_lens)   # built while the forward runs
            out = self.runner.forward(batch, self.kv.req_to_token.table)
            self.processor.process(batch, out, masks)
            self.scheduler.finish_step(batch)
            self._count(batch)
            return self._deliver([r for r in batch.reqs if r.finished or r.output_ids])
        except Exception as e:
            logger.error("engine step failed:\n%s", traceback.format_exc())
            return self.abort_all(internal_error=f"{type(e).__name__}: {e}")

    def _idle(self) -> list[StreamChunk]:
        if self.scheduler.has_work():
            raise RuntimeError("scheduler made no progress with requests pending")
        return []

    def _count(self, batch: ScheduledBatch) -> None:
        self.stats["prefill_tokens_computed"] += batch.num_prefill_tokens
        self.stats["decode_tokens"] += batch.num_tokens - batch.num_prefill_tokens
        if self.debug_checks:
            self.kv.check_integrity()

    def _deliver(self, reqs: list[Req]) -> list[StreamChunk]:
        chunks = []
        for r in reqs:
            if r.rid not in self.active:
                continue   # already delivered its final chunk
            chunk = take_chunk(r, self.tokenizer)
            if chunk is None:
                continue
            if r.finished:
                del self.active[r.rid]
                if r.lora is not None:
                    self.lora.release(r.lora)
                self.stats["cached_tokens"] += r.cache_hit_tokens
                self.stats["prompt_tokens"] += r.prompt_len
                self.stats["requests_finished"] += 1
            chunks.append(chunk)
        return chunks

    # --- validation ------------------------------------------------------------------------------------------
    def _prompt_ids(self, request: GenerateRequest) -> list[int]:
        if request.text is not None:
            ids, param = self.tokenizer.encode(request.text), "prompt"
        else:
            ids, param = list(request.input_ids), "input_ids"
            if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.vocab_size for t in ids):
                raise RequestError(param, "invalid_value", f"input_ids must be ints in [0, {self.vocab_size})")
        if not ids:
            raise RequestError(param, "invalid_value", "the prompt is empty: give at least one token")
        if len(ids) >= self.max_context:
            raise RequestError(param, "context_length_exceeded",
                               f"the prompt has {len(ids)} tokens; the context holds {self.max_context} (prompt "
                               "plus output), so shorten the prompt")
        return ids

    def _fit(self, p: Any, prompt_len: int) -> Any:
        """Clamps max_new_tokens to the context; rejects a request the KV pool could never hold."""
        room = self.max_context - prompt_len
        if p.max_new_tokens > room:
            p = dataclasses.replace(p, max_new_tokens=room, min_new_tokens=min(p.min_new_tokens, room))
        if prompt_len + p.max_new_tokens > self.pool_tokens:
            raise RequestError("max_new_tokens", "context_length_exceeded",
                               f"the prompt ({prompt_len} tokens) plus max_new_tokens ({p.max_new_tokens}) "
                               f"exceeds the KV pool ({self.pool_tokens} tokens); lower max_new_tokens or raise "
                               "max_total_tokens")
        return p

    def get_stats(self) -> dict[str, Any]:
        s = dict(self.stats)
        s["cache_hit_rate"] = s["cached_tokens"] / s["prompt_tokens"] if s["prompt_tokens"] else 0.0
        s["batch_invariant"] = self.runner.batch_invariant
        s["forward_passes"] = self.runner.forward_passes
        s["num_retractions"] = self.scheduler.num_retractions
        s["num_running"] = len(self.scheduler.running) + (self.scheduler.chunked is not None)
        s["num_waiting"] = len(self.scheduler.waiting)
        s["pool_tokens"] = self.pool_tokens
        s["max_total_tokens"] = self.pool_tokens
        s["kv_cache_dtype"] = self.config.kv_cache_dtype
        s["kv_cache_bytes"] = self.runner.kv_pool.nbytes
        s["pool_free_tokens"] = self.kv.allocator.available
        s["cached_tree_tokens"] = self.kv.cache.total_size if self.kv.cache else 0
        s["lora_adapters"] = self.lora_names()
        # which kernel each op runs here, and why not (kernels/registry.py; reading it compiles nothing)
        s["kernels"] = {k.name: {"backend": k.backend, "available": k.available, "used": k.use, "isa": k.isa,
                                 "why": k.why} for k in registry.describe(probe=False)}
        if self.drafter is not None:
            d = self.drafter
            s.update(spec_draft_tokens=d.proposed, spec_accepted_tokens=d.accepted,
                     spec_acceptance_rate=d.accepted / d.proposed if d.proposed else 0.0,
                     spec_row_cost=round(d.cost.row_cost(), 4))
        return s

    def shutdown(self) -> None:
        self.masks.shutdown()
