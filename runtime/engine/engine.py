"""Engine: the offline API (SGLang's shape), a small facade over an EngineCore (the step) and an EngineLoop (who
runs it). `generate`/`async_generate` take and return SGLang's dicts; `submit` takes and returns the protocol's
types (sglite/protocol.py) and is what the server and the language backends build on."""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Iterator

import torch

from sglite.protocol import GenerateRequest, RequestError, SamplingParams, chunk_to_dict

from .config import EngineConfig
from .core import EngineCore
from .handle import RequestHandle
from .loop import EngineLoop


class Engine:
    def __init__(self, model: Any = None, **options: Any):
        from ..memory_fit import kv_bytes
        from ..model import Model, load_model
        from ..weight_plan import WeightPlan

        self.config = cfg = EngineConfig.from_kwargs(**options)
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)   # asked for explicitly; process-wide, as torch's setting is
        if isinstance(model, Model):
            if cfg.weights != "auto" and model.net.plan != WeightPlan.parse(cfg.weights):
                raise ValueError(f"Engine(weights={cfg.weights!r}) was given a Model loaded with weights "
                                 f"{str(model.net.plan)!r}; load it with load_model(weights={cfg.weights!r}) or "
                                 "pass the model path instead")
        else:
            model = load_model(model, device=cfg.device, attention_backend=cfg.attention_backend,
                               weights=cfg.weights, kv_bytes=lambda mc, act: kv_bytes(
                                   mc, act, cfg.kv_cache_dtype, cfg.max_total_tokens, cfg.kv_cache_bytes,
                                   cfg.max_running_requests, cfg.max_context))
        self.model = model
        self.tokenizer = model.tokenizer
        self.core = EngineCore(model, cfg)
        self.max_context = self.core.max_context
        self.pool_tokens = self.core.pool_tokens
        self.grammar = self.core.grammar
        self._loop = EngineLoop(self.core, threaded=cfg.background)
        if cfg.background:      # an engine with its own threads builds the grammar compiler beside its loop
            self.grammar.warm_up()
        self._closing = False

    # --- the protocol API ------------------------------------------------------------------------------------
    def submit(self, request: GenerateRequest, loop: asyncio.AbstractEventLoop | None = None) -> list[RequestHandle]:
        """Validates (RequestError, nothing queued) and queues the request; one handle per sample."""
        return self._submit_all([request], loop)[0]

    def abort(self, request_id: str) -> None:
        """Aborts the request (all n samples of it) wherever it is, its grammar compile included; its slots are
        freed. Unknown ids are ignored."""
        self.grammar.cancel(request_id)
        self._loop.abort(request_id)

    # --- SGLang's dict API -----------------------------------------------------------------------------------
    def generate(self, prompt: Any = None, sampling_params: Any = None, input_ids: Any = None,
                 return_logprob: bool = False, logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                 stream: bool = False, lora_path: str | list[str | None] | None = None,
                 return_constrained_logprob: bool = False) -> dict | list[dict] | Iterator[dict]:
        """lora_path: the adapter every prompt runs under, or one name (None: the base) per prompt.
        return_constrained_logprob: meta_info's output_token_constrained_logprobs (sglite.protocol)."""
        requests, single = self._requests(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                          top_logprobs_num, stream, lora_path, return_constrained_logprob)
        handles = [h for hs in self._submit_all(requests, None) for h in hs]
        if stream:
            return (chunk_to_dict(c, return_logprob) for c in handles[0])
        results = [h.output().to_dict() for h in handles]
        return results[0] if single and len(results) == 1 else results

    async def async_generate(self, prompt: Any = None, sampling_params: Any = None, input_ids: Any = None,
                             return_logprob: bool = False, logprob_start_len: int | None = None,
                             top_logprobs_num: int = 0, stream: bool = False,
                             lora_path: str | list[str | None] | None = None, return_constrained_logprob: bool = False
                             ) -> dict | list[dict] | AsyncIterator[dict]:
        """Like generate; with stream=True returns an async iterator of chunks. Needs background=True."""
        if not self._loop.threaded:
            raise RequestError(None, "invalid_value", "async_generate needs Engine(background=True)")
        requests, single = self._requests(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                          top_logprobs_num, stream, lora_path, return_constrained_logprob)
        handles = [h for hs in self._submit_all(requests, asyncio.get_running_loop()) for h in hs]
        if stream:
            return _adicts(handles[0], return_logprob)
        results = [(await h.aoutput()).to_dict() for h in handles]
        return results[0] if single and len(results) == 1 else results

    def flush_cache(self) -> bool:
        """Empties the prefix cache (and, with speculative decoding, the drafts remembered from finished
        requests). False (nothing done) while requests are running or queued."""
        return self._loop.call(self.core.flush_cache, wait=True)

    def get_stats(self) -> dict[str, Any]:
        return self.core.get_stats()

    # --- LoRA adapters (SGLang's names) ----------------------------------------------------------------------
    def load_lora_adapter(self, lora_name: str, lora_path: str) -> None:
        """Loads an adapter (a PEFT folder or a llama.cpp GGUF LoRA file) under `lora_name` while requests run;
        requests name it with lora_path=lora_name. Raises LoraError (a ValueError) naming what is wrong."""
        self.core.load_lora_adapter(lora_name, lora_path)

    def unload_lora_adapter(self, lora_name: str) -> None:
        """Unloads an adapter. Raises LoraError for an unknown name, LoraInUseError (a LoraError) while queued
        or running requests hold it: those are never cut off; unload again once they finish."""
        self.core.unload_lora_adapter(lora_name)

    def lora_adapters(self) -> list[str]:
        """The names of the loaded adapters."""
        return self.core.lora_names()

    def shutdown(self) -> None:
        """Stops the loop; requests still in flight finish with reason abort (code "shutdown")."""
        if self._closing:
            return
        self._closing = True  # new submissions fail from here on
        self._loop.shutdown()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # --- helpers ---------------------------------------------------------------------------------------------
    def _submit_all(self, requests: list[GenerateRequest], aloop) -> list[list[RequestHandle]]:
        """Validates every request before queueing any (a bad one in a batch queues nothing)."""
        if self._closing:
            raise RuntimeError("the engine is shut down")
        reqs: list[list] = []
        handles: list[list[RequestHandle]] = []
        try:
            for r in requests:
                reqs.append(self.core.make_reqs(r))
            for rs in reqs:
                handles.append(self._loop.submit(rs, aloop))
            return handles
        except BaseException:
            for rs in reqs[len(handles):]:   # made but never queued: give back the adapters they hold
                self.core.release_reqs(rs)
            raise

    @staticmethod
    def _requests(prompt, sampling_params, input_ids, return_logprob, logprob_start_len, top_logprobs_num,
                  stream, lora_path=None, return_constrained_logprob=False) -> tuple[list[GenerateRequest], bool]:
        """generate()'s arguments -> one GenerateRequest per prompt, and whether a single prompt was given."""
        if (prompt is None) == (input_ids is None):
            raise RequestError("prompt", "invalid_value", "generate() takes exactly one of prompt= or input_ids=")
        if prompt is not None:
            single = isinstance(prompt, str)
            texts = [prompt] if single else prompt
            if not isinstance(texts, (list, tuple)) or not all(isinstance(p, str) for p in texts):
                raise RequestError("prompt", "invalid_type", "prompt must be a str or a list of str")
            prompts = [dict(text=t) for t in texts]
        else:
            if not isinstance(input_ids, (list, tuple)) or not input_ids:
                raise RequestError("input_ids", "invalid_value",
                                   "input_ids must be a non-empty list of ints or a list of such lists")
            single = not isinstance(input_ids[0], (list, tuple))
            prompts = [dict(input_ids=x) for x in ([input_ids] if single else input_ids)]
        if not prompts:
            raise RequestError("prompt", "invalid_value", "generate() got an empty batch of prompts")
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(prompts):
                raise RequestError("sampling_params", "invalid_value",
                                   f"sampling_params is a list of {len(sampling_params)} but there are "
                                   f"{len(prompts)} prompts")
            params = [SamplingParams.from_dict(p) for p in sampling_params]
        else:
            params = [SamplingParams.from_dict(sampling_params)] * len(prompts)
        if stream and (len(prompts) != 1 or params[0].n != 1):
            raise RequestError("stream", "invalid_value", "stream=True takes a single prompt with n=1")
        if isinstance(lora_path, (list, tuple)):
            if len(lora_path) != len(prompts):
                raise RequestError("lora_path", "invalid_value",
                                   f"lora_path is a list of {len(lora_path)} but there are {len(prompts)} prompts")
            loras = list(lora_path)
        else:
            loras = [lora_path] * len(prompts)
        return [GenerateRequest(params=p, return_logprob=return_logprob, logprob_start_len=logprob_start_len,
                                top_logprobs_num=top_logprobs_num, stream=stream, lora_path=lp,
                                return_constrained_logprob=return_constrained_logprob, **kw)
                for kw, p, lp in zip(prompts, params, loras)], single


async def _adicts(handle: RequestHandle, with_logprobs: bool) -> AsyncIterator[dict]:
    async for chunk in handle:
        yield chunk_to_dict(chunk, with_logprobs)
