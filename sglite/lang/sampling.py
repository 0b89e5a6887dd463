"""What a program sets of the generation options, and how that meets protocol's `SamplingParams`.

`GenOptions` holds only what one `gen` (or one `run()`) set, by SGLang's names. The options themselves, their
defaults and their validation are protocol's: the executor merges a gen's options over the run's `GenParams`
with `SamplingParams.replace`, which validates the result, when the gen is appended to a state (before any
backend call). `GenParams` is what a backend is asked: the merged `SamplingParams` plus the request-level
logprob options, which are not sampling params.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from .regexes import REGEX_BOOL
from ..protocol import (ALIASES, CONSTRAINT_KINDS, FIELD_NAMES, GenerateRequest, RequestError, SamplingParams,
                        json_schema_text)

@dataclass(frozen=True)
class DtypeRule:
    """What `gen(dtype=...)` asks: a regex for the output, and stop strings added to the gen's own."""
    regex: str
    stop: tuple[str, ...] = ()


# A number ends at the first space or newline, as SGLang's gen_int/gen_float do (its REGEX_INT/REGEX_FLOAT plus
# the stop strings " " and "\n"). Here the regex also admits anything after that space or newline: the stop
# string ends the gen in the same token and cuts what follows, so a token such as " hours" can end "24". With
# SGLang's regex only a bare whitespace token can end the number, and a model that would write "24 hours" is
# held to writing more digits ("24000000...") until max_tokens.
_NUMBER_END = r"(?:[ \n][\s\S]*)?"
_NUMBER_STOPS = (" ", "\n")

# A JSON string: any character but a quote, a backslash or a control character. SGLang's REGEX_STR (letters,
# digits and whitespace) also admits raw tabs and newlines, which JSON forbids, and refuses punctuation.
REGEX_JSON_STR = r'"[^"\\\x00-\x1f]*"'

DTYPES: dict[Any, DtypeRule] = {
    int: DtypeRule(r"[-+]?[0-9]+" + _NUMBER_END, _NUMBER_STOPS),
    float: DtypeRule(r"[-+]?[0-9]*\.?[0-9]+" + _NUMBER_END, _NUMBER_STOPS),
    bool: DtypeRule(REGEX_BOOL),
    str: DtypeRule(REGEX_JSON_STR),
}
DTYPES.update({k.__name__: v for k, v in list(DTYPES.items())})
DTYPES["string"] = DTYPES[str]

# request-level options a gen or run() may set beside the sampling params
REQUEST_OPTIONS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs", "lora_path",
                   "return_constrained_logprob")
OPTION_NAMES = FIELD_NAMES | frozenset(ALIASES) | frozenset(REQUEST_OPTIONS)


@dataclass(frozen=True)
class GenParams:
    """What one gen asks of a backend: validated sampling params and the logprob options. A run's defaults are
    a GenParams too; each gen's `GenOptions.over` makes its own from them."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    return_logprob: bool = False
    logprob_start_len: int | None = None
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False   # accepted for SGLang programs; logprob entries always carry text
    lora_path: str | None = None            # the LoRA adapter (a name the backend loaded); None: the base model
    return_constrained_logprob: bool = False   # meta_info's output_token_constrained_logprobs (sglite.protocol)

    def request(self, text: str) -> GenerateRequest:
        """The engine request that continues `text` under these params."""
        return GenerateRequest(params=self.sampling, text=text, return_logprob=self.return_logprob,
                               logprob_start_len=self.logprob_start_len, top_logprobs_num=self.top_logprobs_num,
                               lora_path=self.lora_path, return_constrained_logprob=self.return_constrained_logprob)


@dataclass(frozen=True)
class GenOptions:
    """The options one gen (or one run()) set: sampling overrides (protocol's field names, the user's values;
    a json_schema already made JSON text) and logprob options, kept apart. Not validated here: `over` does
    that, through protocol, once the run's values are known."""

    sampling: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    logprobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    dtype_stop: tuple[str, ...] = ()   # stop strings a dtype adds to the merged ones

    @classmethod
    def from_kwargs(cls, dtype: Any = None, **kwargs: Any) -> "GenOptions":
        """From user keywords (SGLang names, `max_tokens`/`min_tokens` aliases, None = not set). An unknown
        name raises TypeError (as a keyword a function does not take), with the closest known name."""
        sampling: dict[str, Any] = {}
        logprobs: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key not in OPTION_NAMES:
                close = difflib.get_close_matches(key, sorted(OPTION_NAMES), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"unknown generation option {key!r}{hint}")
            if value is None:
                continue
            if key in REQUEST_OPTIONS:
                logprobs[key] = value
            else:
                sampling[ALIASES.get(key, key)] = value
        if sampling.get("n", 1) != 1:
            raise RequestError("n", "invalid_value",
                               "gen(n=...) > 1 is not supported; use s.fork(n) to sample n continuations")
        dtype_stop: tuple[str, ...] = ()
        if dtype is not None:
            rule = DTYPES.get(dtype) if isinstance(dtype, (type, str)) else None
            if rule is None:
                raise RequestError("dtype", "invalid_value",
                                   f"dtype must be one of int, float, bool, str, got {dtype!r}")
            if any(kind in sampling for kind in CONSTRAINT_KINDS):
                raise RequestError("dtype", "invalid_value",
                                   "give either dtype= or a constraint (regex=, json_schema=, ebnf=, "
                                   "grammar=, structural_tag=, span_of=), not both")
            sampling["regex"], dtype_stop = rule.regex, rule.stop
        if "json_schema" in sampling:   # a pydantic model converted once, not on every call
            sampling["json_schema"] = json_schema_text(sampling["json_schema"])
        return cls(MappingProxyType(sampling), MappingProxyType(logprobs), dtype_stop)

    def over(self, base: GenParams) -> GenParams:
        """These options over `base` (a run's values). Raises RequestError (a ValueError) naming the field when
        the merged params are invalid. A dtype's stop strings are added to the merged ones."""
        sampling = base.sampling.replace(**self.sampling)
        extra = tuple(s for s in self.dtype_stop if s not in sampling.stop)
        if extra:
            sampling = sampling.replace(stop=sampling.stop + extra)
        lora = self.logprobs.get("lora_path")
        if lora is not None and (not isinstance(lora, str) or not lora):
            raise RequestError("lora_path", "invalid_type",
                               f"lora_path must be an adapter name (a non-empty str) or None, got {lora!r}")
        return dataclasses.replace(base, sampling=sampling, **self.logprobs)

    def describe(self) -> str:
        parts = []
        for k, v in (*self.sampling.items(), *self.logprobs.items()):
            if k == "json_schema" and len(v) >= 40:
                v = v[:37] + "..."
            parts.append(f"{k}={v!r}")
        if self.dtype_stop:
            parts.append(f"dtype_stop={list(self.dtype_stop)!r}")
        return ", ".join(parts)

    def __repr__(self) -> str:
        return f"GenOptions({self.describe()})"
