"""The interface between the interpreter and a model service.

A backend answers four requests: generate (optionally streamed), commit a prefix to its prefix cache, score
the choices of a `select`, and describe its chat template. Backends are shared by many program threads at
once, so every method must be thread-safe."""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..lang.chat_template import ChatTemplate
from ..lang.choices import ChoicesDecision, ChoicesSamplingMethod
from ..lang.sampling import GenParams


@dataclass(frozen=True)
class Prompt:
    """What a program has built so far: the raw text, and the same text as chat messages (completed role
    blocks plus the open one, if any) for chat-only APIs."""
    text: str
    messages: tuple[dict, ...] = ()


@dataclass
class Completion:
    text: str
    meta_info: dict[str, Any] = field(default_factory=dict)


class UsageStats:
    """Token counters summed over every request a backend sent (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = self.prompt_tokens = self.cached_tokens = self.completion_tokens = 0

    def add(self, meta_info: dict[str, Any]) -> None:
        with self._lock:
            self.requests += 1
            self.prompt_tokens += int(meta_info.get("prompt_tokens") or 0)
            self.cached_tokens += int(meta_info.get("cached_tokens") or 0)
            self.completion_tokens += int(meta_info.get("completion_tokens") or 0)

    @property
    def cache_hit_rate(self) -> float:
        """Fraction of prompt tokens served from the prefix cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "completion_tokens": self.completion_tokens,
                "cache_hit_rate": self.cache_hit_rate}


class Backend(ABC):
    """Base of all language backends."""

    # whether generate's meta_info carries output_token_constrained_logprobs when asked (sglite.protocol)
    constrained_logprobs = False

    def __init__(self) -> None:
        self.usage = UsageStats()

    @property
    def token_usage(self) -> UsageStats:
        """SGLang's name for `usage` (its backends' `token_usage.prompt_tokens`, `.reset()`)."""
        return self.usage

    @abstractmethod
    def generate(self, prompt: Prompt, params: GenParams) -> Completion:
        """Continue `prompt` under `params` (merged and validated: `params.sampling` is protocol's
        SamplingParams; an sglite engine takes `params.request(prompt.text)`, a GenerateRequest)."""

    def generate_stream(self, prompt: Prompt, params: GenParams) -> Iterator[Completion]:
        """Yield text increments; the last one carries the final meta_info. Default: one chunk."""
        yield self.generate(prompt, params)

    @abstractmethod
    def select(self, prompt: Prompt, choices: list[str], temperature: float,
               method: ChoicesSamplingMethod, lora_path: str | None = None) -> ChoicesDecision:
        """Pick one of `choices` as the continuation of `prompt` (scored under the LoRA adapter `lora_path`)."""

    def commit_prefix(self, prompt: Prompt, lora_path: str | None = None) -> None:
        """Put `prompt` into the prefix cache (of the LoRA adapter `lora_path`: the cache keys on it) before
        several requests extend it (fork, run_batch).
        Backends without a prefix cache do nothing."""

    def chat_template(self) -> ChatTemplate:
        return ChatTemplate.chatml()

    def flush_cache(self) -> bool:
        return False

    def get_server_info(self) -> dict[str, Any]:
        return {}

    def shutdown(self) -> None:
        """Release what the backend holds (an engine it built, HTTP connections). Called by its owner; the
        library calls it only for the default runtime it created itself (see get_default_backend)."""
