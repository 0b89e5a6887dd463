"""SamplingParams: every generation option of the language, in one frozen dataclass.

A field left at None means "not set here". Per-`gen` values override `run()` defaults in exactly one place,
`SamplingParams.merged_over`. Backends translate the merged result: `engine_dict()` (native / in-process engines,
SGLang key names) and `request_options()` (logprob options that are not sampling params).
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, fields, replace
from typing import Any

# dtype= shorthand of sgl.gen -> the regex that constrains it
DTYPE_REGEX: dict[Any, str] = {
    int: r"[-+]?[0-9]+",
    float: r"[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?",
    bool: r"(True|False)",
    str: r"\"[^\"\\\n]*\"",
}
DTYPE_REGEX.update({k.__name__: v for k, v in list(DTYPE_REGEX.items())})

ALIASES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}
# request-level options carried with the sampling options (they are not engine sampling params)
REQUEST_OPTIONS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    n: int | None = None
    stop: str | tuple[str, ...] | None = None
    stop_token_ids: tuple[int, ...] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    no_stop_trim: bool | None = None
    seed: int | None = None
    regex: str | None = None
    json_schema: str | None = None   # a JSON string; dicts and pydantic classes are converted in from_kwargs
    ebnf: str | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    return_text_in_logprobs: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.stop_token_ids, list):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as e:
                raise ValueError(f"invalid regex {self.regex!r}: {e}") from None
        if self.n not in (None, 1):
            raise ValueError("gen(n=...) > 1 is not supported; use s.fork(n) to sample n continuations")
        for key in ("max_new_tokens", "min_new_tokens"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{key} must be a non-negative int, got {v!r}")
        constraints = [k for k in ("regex", "json_schema", "ebnf") if getattr(self, k) is not None]
        if len(constraints) > 1:
            raise ValueError(f"use one of regex / json_schema / ebnf per gen, got {constraints}")

    @classmethod
    def from_kwargs(cls, dtype: Any = None, **kwargs: Any) -> "SamplingParams":
        """Build from user keywords (SGLang names, `max_tokens` aliases); unknown names raise TypeError.
        None values mean "unset"."""
        names = {f.name for f in fields(cls)}
        clean: dict[str, Any] = {}
        for key, value in kwargs.items():
            key = ALIASES.get(key, key)
            if key not in names:
                close = difflib.get_close_matches(key, list(names) + list(ALIASES), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"unknown generation option {key!r}{hint}")
            if value is not None:
                clean[key] = value
        if dtype is not None:
            if dtype not in DTYPE_REGEX:
                raise ValueError(f"dtype must be one of int, float, bool, str, got {dtype!r}")
            if "regex" in clean or "json_schema" in clean:
                raise ValueError("give either dtype= or regex=/json_schema=, not both")
            clean["regex"] = DTYPE_REGEX[dtype]
        if "json_schema" in clean:
            clean["json_schema"] = schema_to_json(clean["json_schema"])
        return cls(**clean)

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls)) | frozenset(ALIASES)

    def is_set(self, name: str) -> bool:
        return getattr(self, name) is not None

    def set_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def merged_over(self, defaults: "SamplingParams") -> "SamplingParams":
        """The one merge rule: every field set here wins; unset fields take `defaults`' value."""
        return replace(defaults, **self.set_fields())

    def engine_dict(self) -> dict[str, Any]:
        """Sampling params for Engine.generate / native /generate (unset fields left to the engine's defaults)."""
        out = {k: v for k, v in self.set_fields().items() if k not in REQUEST_OPTIONS}
        for key in ("stop", "stop_token_ids"):
            if isinstance(out.get(key), tuple):
                out[key] = list(out[key])
        return out

    def request_options(self) -> dict[str, Any]:
        """The logprob request options that are set (return_logprob, logprob_start_len, top_logprobs_num)."""
        out = {k: getattr(self, k) for k in ("return_logprob", "logprob_start_len", "top_logprobs_num")
               if getattr(self, k) is not None}
        return out

    def describe(self) -> str:
        parts = []
        for k, v in self.set_fields().items():
            if k == "json_schema":
                v = v if len(v) < 40 else v[:37] + "..."
            parts.append(f"{k}={v!r}")
        return ", ".join(parts)

    def __repr__(self) -> str:
        return f"SamplingParams({self.describe()})"


def schema_to_json(schema: Any) -> str:
    """A JSON Schema given as a dict, a JSON string, or a pydantic model class -> JSON string."""
    if isinstance(schema, str):
        try:
            json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema is not valid JSON: {e}") from None
        return schema
    if isinstance(schema, dict):
        return json.dumps(schema)
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        # pydantic ignores undeclared keys unless extra="allow", so generating them is wasted (and unbounded):
        # close the objects while generating
        out = schema.model_json_schema()
        extra = getattr(schema, "model_config", {}).get("extra")
        return json.dumps(out if extra == "allow" else closed_schema(out))
    raise TypeError(f"json_schema must be a dict, a JSON string or a pydantic model class, got {schema!r}")


def closed_schema(schema: Any) -> Any:
    """A copy of `schema` where every object that lists `properties` and says nothing about
    `additionalProperties` gets `additionalProperties: false`."""
    if isinstance(schema, list):
        return [closed_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed_schema(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


RUN_DEFAULTS = SamplingParams(max_new_tokens=128)
