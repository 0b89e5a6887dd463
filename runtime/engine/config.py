"""EngineConfig: every engine option in one frozen dataclass, validated at construction."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..defaults import (GRAMMAR_CACHE_BYTES, GRAMMAR_COMPILE_BUDGET_S, JSON_PROPERTY_ORDER, JSON_WHITESPACE,
                        JSON_WHITESPACE_MODES, PROPERTY_ORDERS)

SCHEDULE_POLICIES = ("lpm", "fcfs")


@dataclass(frozen=True)
class EngineConfig:
    max_running_requests: int = 64        # requests decoding at once (also rows of the req -> token table)
    max_total_tokens: int | None = None   # KV pool slots; None: enough for max_running_requests x 2048 tokens
    chunked_prefill_size: int = 2048      # prefill tokens per step; a longer prompt is split (-1: never split)
    max_prefill_tokens: int = 16384       # prefill tokens admitted per step when not chunking
    enable_mixed_batch: bool = True       # decode rides along with prefill chunks in one forward pass
    schedule_policy: str = "lpm"          # "lpm" (longest cached prefix first) or "fcfs"
    disable_radix_cache: bool = False
    attention_backend: str | None = None  # "torch" | "triton" | None (triton on CUDA)
    batch_invariant: bool | None = None   # a request's tokens do not depend on what shares its steps or how its
                                          # prompt is chunked (run_batch gives each prompt what a lone run
                                          # gives): None: where the attention backend offers it (the torch
                                          # backend on the CPU); True: required (an error elsewhere); False: off
                                          # (prefill attention by SDPA, shared-prefix cascade: a little faster)
    enable_jump_forward: bool = True
    json_whitespace: str = JSON_WHITESPACE        # JSON-schema outputs: "standard" (`{"a": 1, "b": 2}`),
                                                  # "compact", "flexible" (bounded runs) or "any" (unbounded)
    json_property_order: str = JSON_PROPERTY_ORDER  # JSON-schema outputs: named properties in schema order, or
                                                    # "any"
    grammar_mask_overlap: str = "auto"    # build grammar masks during the forward pass: "auto" | "on" | "off"
    grammar_compile_budget_s: float = GRAMMAR_COMPILE_BUDGET_S   # one constraint's compile (first mask
                                          # included): past it the request is refused (RequestError, HTTP 400)
                                          # naming the construct
    grammar_cache_bytes: int = GRAMMAR_CACHE_BYTES   # every compiled grammar artefact kept (grammars, automata,
                                          # token-index tables, mask caches); least recently used out past it
    num_threads: int | None = None        # CPU: torch's intra-op threads, process-wide (None: torch's choice,
                                          # one per core; fewer when other busy processes share the cores)
    weights: str = "auto"                 # weight format: "auto" (measured per machine; a Model passed in keeps
                                          # its own), "fp32" | "bf16" | "int8" | "int4" | "w4a16" | "w4a8",
                                          # or "w4a16+bf16" (decode rows + prefill rows); see
                                          # runtime/weight_plan.py
    device: str = "cpu"
    seed: int = 0                         # seeds requests that give no seed of their own
    background: bool = True               # run the scheduling loop in a daemon thread
    max_context: int | None = None        # None: the model's context length
    in_batch_prefix_threshold: int = 32   # defer a waiting request sharing this many uncached tokens with one admitted
    speculative_algorithm: str | None = None   # "ngram": drafts from the request's own and other requests' text,
                                               # verified in the next forward pass (see speculative.py); None: off
    speculative_num_draft_tokens: int = 6      # the most draft tokens per request per pass
    speculative_row_cost: float | None = None  # what one more row adds to a step, as a share of a one-row step,
                                               # for planning drafts; None: measured from the engine's steps
    lora_paths: Any = None                # LoRA adapters loaded at start: {name: path} or ["name=path", ...]
                                          # (PEFT folders or llama.cpp GGUF LoRA files); normalized to a tuple of
                                          # (name, path) pairs. A request picks one with lora_path=NAME
    max_loras_per_batch: int = 8          # distinct adapters one forward pass may hold (the base not counted);
                                          # requests past it wait their turn
    kv_cache_dtype: str = "auto"          # KV cache format: "auto" (the activations' dtype), "bf16", "int8" (a
                                          # scale per token and head) or "fp8_e4m3" (likewise); see kv_pool.py
    kv_cache_bytes: int = 2 << 30         # the KV cache's memory when max_total_tokens is None: the pool gets
                                          # as many tokens as fit (at most max_running_requests x the context)

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ValueError:
            return ValueError(f"EngineConfig.{key} {why}, got {getattr(self, key)!r}")

        for key in ("max_running_requests", "max_prefill_tokens"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise bad(key, "must be a positive int")
        if self.max_total_tokens is not None and (not isinstance(self.max_total_tokens, int)
                                                   or self.max_total_tokens < 2):
            raise bad("max_total_tokens", "must be an int >= 2 or None")
        if not isinstance(self.chunked_prefill_size, int) or (self.chunked_prefill_size < 1
                                                               and self.chunked_prefill_size != -1):
            raise bad("chunked_prefill_size", "must be a positive int or -1 (off)")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise bad("schedule_policy", f"must be one of {SCHEDULE_POLICIES}")
        if self.max_context is not None and (not isinstance(self.max_context, int) or self.max_context < 2):
            raise bad("max_context", "must be an int >= 2 or None")
        if self.json_whitespace not in JSON_WHITESPACE_MODES:
            raise bad("json_whitespace", f"must be one of {JSON_WHITESPACE_MODES}")
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise bad("num_threads", "must be a positive int or None")
        if self.batch_invariant not in (None, True, False):
            raise bad("batch_invariant", "must be None (where offered), True or False")
        if not (isinstance(self.grammar_compile_budget_s, (int, float)) and self.grammar_compile_budget_s > 0):
            raise bad("grammar_compile_budget_s", "must be a number of seconds > 0")
        if not (isinstance(self.grammar_cache_bytes, int) and not isinstance(self.grammar_cache_bytes, bool)
                and self.grammar_cache_bytes > 0):
            raise bad("grammar_cache_bytes", "must be an int number of bytes > 0")
        if self.grammar_mask_overlap not in ("auto", "on", "off"):
            raise bad("grammar_mask_overlap", "must be 'auto', 'on' or 'off'")
        if self.json_property_order not in PROPERTY_ORDERS:
            raise bad("json_property_order", f"must be one of {PROPERTY_ORDERS}")
        if self.weights != "auto":
            from ..weight_plan import WeightPlan
            WeightPlan.parse(self.weights)   # raises ValueError naming the bad format
        if self.speculative_algorithm not in (None, "ngram"):
            raise bad("speculative_algorithm", "must be None (off) or 'ngram'")
        if not isinstance(self.speculative_num_draft_tokens, int) or not 1 <= self.speculative_num_draft_tokens <= 32:
            raise bad("speculative_num_draft_tokens", "must be an int in [1, 32]")
        if self.speculative_row_cost is not None and (isinstance(self.speculative_row_cost, bool) or not isinstance(
                self.speculative_row_cost, (int, float)) or not 0 <= self.speculative_row_cost <= 1):
            raise bad("speculative_row_cost", "must be None (measured) or a number in [0, 1]")
        if self.in_batch_prefix_threshold < 1:
            raise bad("in_batch_prefix_threshold", "must be >= 1")
        from ..kv_pool import KV_CACHE_DTYPES
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise bad("kv_cache_dtype", f"must be one of {', '.join(map(repr, KV_CACHE_DTYPES))}")
        if isinstance(self.kv_cache_bytes, bool) or not isinstance(self.kv_cache_bytes, int) \
                or self.kv_cache_bytes < 1:
            raise bad("kv_cache_bytes", "must be a positive int")
        if isinstance(self.max_loras_per_batch, bool) or not isinstance(self.max_loras_per_batch, int) \
                or self.max_loras_per_batch < 1:
            raise bad("max_loras_per_batch", "must be a positive int")
        object.__setattr__(self, "lora_paths", parse_lora_paths(self.lora_paths))

    @classmethod
    def from_kwargs(cls, **kwargs) -> "EngineConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"unknown Engine option(s) {unknown}; known options: {sorted(known)}")
        return cls(**kwargs)

    @property
    def prefill_budget(self) -> int:
        """Prefill tokens one step may compute."""
        if self.chunked_prefill_size == -1:
            return self.max_prefill_tokens
        return min(self.chunked_prefill_size, self.max_prefill_tokens)


def parse_lora_paths(value: Any) -> tuple[tuple[str, str], ...]:
    """EngineConfig.lora_paths as (name, path) pairs: from None, a {name: path} dict, or a list of "name=path"
    strings (SGLang's `--lora-paths`; a bare path is named after its last component). Raises ValueError naming
    the entry when a name is empty, repeated, the entry is neither form, or its path holds no adapter."""
    if value is None or value == ():
        return ()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = []
        for entry in value:
            if isinstance(entry, (list, tuple)) and len(entry) == 2:
                items.append(tuple(entry))
            elif isinstance(entry, str):
                name, sep, path = entry.partition("=")
                if not sep:
                    import os
                    name, path = os.path.basename(os.path.normpath(entry)), entry
                items.append((name, path))
            else:
                raise ValueError(f"EngineConfig.lora_paths entry {entry!r} is not 'name=path' or a (name, path) pair")
    else:
        raise ValueError(f"EngineConfig.lora_paths must be a {{name: path}} dict or a list of 'name=path' strings, "
                         f"got {value!r}")
    out, seen = [], set()
    for name, path in items:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"EngineConfig.lora_paths: adapter name {name!r} must be a non-empty string")
        if not isinstance(path, (str,)) and not hasattr(path, "__fspath__"):
            raise ValueError(f"EngineConfig.lora_paths[{name!r}]: path must be a str or os.PathLike, got {path!r}")
        if name in seen:
            raise ValueError(f"EngineConfig.lora_paths names adapter {name!r} twice")
        seen.add(name)
        out.append((name, str(path)))
    if out:
        from ..lora import lora_format
        for name, path in out:          # a missing or unknown adapter fails here, before any model loads
            lora_format(path)
    return tuple(out)
