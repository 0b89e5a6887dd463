"""SamplingParams: every per-request generation option, in one frozen dataclass (SGLang's key names).

Build from a user dict with `SamplingParams.from_dict(d)`; override with `dataclasses.replace`. Validation runs in
`__post_init__`, so an invalid value raises ValueError naming the key before the request is queued.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0          # 0 = greedy
    top_p: float = 1.0                # in (0, 1]
    top_k: int = -1                   # -1 = off; 1 = greedy
    min_p: float = 0.0                # in [0, 1]
    frequency_penalty: float = 0.0    # in [-2, 2], on output tokens
    presence_penalty: float = 0.0     # in [-2, 2], on output tokens
    repetition_penalty: float = 1.0   # > 0, on prompt and output tokens (1 = off)
    stop: tuple[str, ...] = ()        # stop strings, trimmed from the text unless no_stop_trim
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1                        # samples per prompt; they share the prompt's KV
    seed: int | None = None           # per-request generator; same seed -> same sample in any batch
    regex: str | None = None
    json_schema: str | None = None    # a JSON string (dicts are serialised by from_dict)
    ebnf: str | None = None

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ValueError:
            return ValueError(f"sampling_params[{key!r}] {why}, got {getattr(self, key)!r}")

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        for key in ("max_new_tokens", "min_new_tokens", "top_k", "n"):
            if not is_int(getattr(self, key)):
                raise bad(key, "must be an int")
        for key in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
            if not is_num(getattr(self, key)):
                raise bad(key, "must be a number")
        if self.max_new_tokens < 0:
            raise bad("max_new_tokens", "must be >= 0")
        if not 0 <= self.min_new_tokens:
            raise bad("min_new_tokens", "must be >= 0")
        if self.min_new_tokens > self.max_new_tokens:
            raise bad("min_new_tokens", f"must be <= max_new_tokens ({self.max_new_tokens})")
        if self.temperature < 0:
            raise bad("temperature", "must be >= 0 (0 means greedy)")
        if not 0 < self.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if self.top_k == 0 or self.top_k < -1:
            raise bad("top_k", "must be -1 (off) or >= 1")
        if not 0 <= self.min_p <= 1:
            raise bad("min_p", "must be in [0, 1]")
        for key in ("frequency_penalty", "presence_penalty"):
            if not -2 <= getattr(self, key) <= 2:
                raise bad(key, "must be in [-2, 2]")
        if self.repetition_penalty <= 0:
            raise bad("repetition_penalty", "must be > 0 (1 means off)")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise bad("stop", "must be a non-empty string or a list of non-empty strings")
        if not all(is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be a list of non-negative token ids")
        for key in ("ignore_eos", "skip_special_tokens", "no_stop_trim"):
            if not isinstance(getattr(self, key), bool):
                raise bad(key, "must be a bool")
        if self.n < 1:
            raise bad("n", "must be >= 1")
        if self.seed is not None and not is_int(self.seed):
            raise bad("seed", "must be an int or None")
        grammars = [k for k in ("regex", "json_schema", "ebnf") if getattr(self, k) is not None]
        for key in grammars:
            if not isinstance(getattr(self, key), str):
                raise bad(key, "must be a string")
        if len(grammars) > 1:
            raise ValueError(f"sampling_params may set only one of regex, json_schema, ebnf; got {grammars}")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | "SamplingParams" | None) -> "SamplingParams":
        """Validated params from a user dict. Unknown keys raise ValueError naming them."""
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"sampling_params must be a dict, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown sampling_params key(s) {unknown}; known keys: {sorted(known)}")
        kw = {k: v for k, v in d.items() if v is not None}  # None means "the default"
        if isinstance(kw.get("stop"), str):
            kw["stop"] = (kw["stop"],)
        for key in ("stop", "stop_token_ids"):
            if key in kw:
                if not isinstance(kw[key], (list, tuple)):
                    raise ValueError(f"sampling_params[{key!r}] must be a list, got {kw[key]!r}")
                kw[key] = tuple(kw[key])
        if kw.get("json_schema") is not None and not isinstance(kw["json_schema"], str):
            schema = kw["json_schema"]
            if hasattr(schema, "model_json_schema"):  # a pydantic model class
                schema = schema.model_json_schema()
            try:
                kw["json_schema"] = json.dumps(schema)
            except TypeError as e:
                raise ValueError(f"sampling_params['json_schema'] must be a JSON string or dict: {e}") from None
        for key in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
            if isinstance(kw.get(key), int) and not isinstance(kw[key], bool):
                kw[key] = float(kw[key])
        return cls(**kw)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return bool(self.frequency_penalty or self.presence_penalty or self.repetition_penalty != 1.0)

    @property
    def grammar_spec(self) -> tuple[str, str] | None:
        """(kind, spec) of the constraint, or None."""
        for kind in ("regex", "json_schema", "ebnf"):
            if getattr(self, kind) is not None:
                return kind, getattr(self, kind)
        return None
