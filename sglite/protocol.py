"""The request protocol: the one definition of what a generation request is, what comes back, and how a bad
request is refused. Torch-free; imported by the language, the backends, the server, the engine and every fake.

    params = SamplingParams.from_dict({"temperature": 0, "json_schema": Model})   # validated here, once
    request = GenerateRequest(input_ids=[...], params=params, return_logprob=True)
    for chunk in engine_stream:       # StreamChunk: increments named new_*, totals named *_tokens
        ...
    output.finish_reason.kind is FinishKind.STOP

Every bad input raises `RequestError(param, code, message)`, a ValueError, from whichever layer sees it first;
the server turns it into an HTTP 400 by its fields, never by its text.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import uuid
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, AsyncIterator, Iterator, Protocol, runtime_checkable

# The constraint kinds a request may set (at most one). Every layer names them through this tuple.
# ebnf: GBNF as SGLang takes it (a Lark grammar is accepted too); grammar: Lark; structural_tag: JSON text (see
# sglite.runtime.constrained.cfg.structural_tag); span_of: a text the output is a verbatim (non-empty) span of
CONSTRAINT_KINDS = ("regex", "json_schema", "ebnf", "grammar", "structural_tag", "span_of")


class RequestError(ValueError):
    """A request the system refuses before doing any work. `param` names the offending field (SGLang's names:
    `temperature`, `json_schema`, `prompt`, ...; None when no single field is at fault), `code` is a stable
    machine-readable kind (`invalid_value`, `invalid_type`, `unknown_param`, `invalid_grammar`,
    `unsupported_schema`, `context_length_exceeded`)."""

    def __init__(self, param: str | None, code: str, message: str):
        super().__init__(message)
        self.param = param
        self.code = code
        self.message = message

    def __reduce__(self):   # picklable (Ray workers, multiprocessing)
        return (RequestError, (self.param, self.code, self.message))


# --- sampling ------------------------------------------------------------------------------------------------
_INT_FIELDS = ("max_new_tokens", "min_new_tokens", "top_k", "n", "dry_allowed_length")
_NUM_FIELDS = ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
               "dry_base")
_BOOL_FIELDS = ("ignore_eos", "skip_special_tokens", "no_stop_trim", "close_at_budget")
ALIASES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}
OPENAI_NAMES = {field: alias for alias, field in ALIASES.items()}   # a SamplingParams field -> OpenAI's name


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class SamplingParams:
    """Every per-request generation option (SGLang's names), validated at construction. Override with
    `dataclasses.replace`, which validates again."""

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
    stop_regex: tuple[str, ...] = ()  # Python regexes: generation stops once re.search finds one in the output
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1                        # samples per prompt; they share the prompt's KV
    seed: int | None = None           # per-request generator; same seed -> same sample in any batch
    regex: str | None = None          # checked by the grammar compiler (its dialect), not by Python's re
    json_schema: str | None = None    # a JSON string; dicts and pydantic models go through json_schema_text
    ebnf: str | None = None
    grammar: str | None = None
    structural_tag: str | None = None     # JSON text; a dict goes through json.dumps
    span_of: str | None = None            # the output is a verbatim span of this text (sglite's own)
    logit_bias: tuple[tuple[int, float], ...] | None = None   # (token id, added to its logit), ids ascending
    # DRY ("don't repeat yourself", as llama.cpp defines it), on output tokens: a token that would extend a
    # sequence already in the output past dry_allowed_length tokens loses multiplier * base^(length - allowed)
    # from its logit; a token holding a breaker string ends every sequence. None: the engine's default (on for
    # json_schema constraints, off otherwise: runtime/engine/sampling_params.py); 0: off
    dry_multiplier: float | None = None
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")
    # a constrained output whose token budget would run out mid-value spends its last tokens on the shortest
    # completion of its grammar, one byte per token, so it ends valid instead of at `length` (meta_info
    # "closed_at_budget"); False: it runs to `length` as the model writes it
    close_at_budget: bool = True

    def __post_init__(self) -> None:
        def bad(key: str, why: str, code: str = "invalid_value") -> RequestError:
            return RequestError(key, code, f"sampling_params[{key!r}] {why}, got {getattr(self, key)!r}")

        for key in _INT_FIELDS:
            if not _is_int(getattr(self, key)):
                raise bad(key, "must be an int", "invalid_type")
        for key in _NUM_FIELDS:
            if not _is_num(getattr(self, key)):
                raise bad(key, "must be a number", "invalid_type")
        for key in _BOOL_FIELDS:
            if not isinstance(getattr(self, key), bool):
                raise bad(key, "must be a bool", "invalid_type")
        if self.max_new_tokens < 0:
            raise bad("max_new_tokens", "must be >= 0")
        if self.min_new_tokens < 0:
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
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise bad("stop", "must be a non-empty string or a list of non-empty strings")
        if not isinstance(self.stop_token_ids, tuple) or not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be a list of non-negative token ids")
        if not isinstance(self.stop_regex, tuple) or not all(isinstance(r, str) and r for r in self.stop_regex):
            raise bad("stop_regex", "must be a non-empty string or a list of non-empty strings")
        for pattern in self.stop_regex:   # matched with Python's re on the output text (not a grammar)
            try:
                re.compile(pattern)
            except (re.error, RecursionError) as e:
                raise RequestError("stop_regex", "invalid_value",
                                   f"sampling_params['stop_regex'] {pattern!r} does not compile: {e}") from None
        if self.logit_bias is not None and not (
                isinstance(self.logit_bias, tuple) and all(
                    isinstance(p, tuple) and len(p) == 2 and _is_int(p[0]) and p[0] >= 0 and _is_num(p[1])
                    and math.isfinite(p[1]) for p in self.logit_bias)):
            raise bad("logit_bias", "must map token ids (ints >= 0) to finite numbers")
        if self.dry_multiplier is not None and not (_is_num(self.dry_multiplier) and
                                                    0 <= self.dry_multiplier <= 100):
            raise bad("dry_multiplier", "must be a number in [0, 100] (0 means off) or None (the engine's default)")
        if not 1 < self.dry_base <= 100:
            raise bad("dry_base", "must be in (1, 100]")
        if self.dry_allowed_length < 1:
            raise bad("dry_allowed_length", "must be >= 1")
        if not isinstance(self.dry_sequence_breakers, tuple) or \
                not all(isinstance(s, str) and s for s in self.dry_sequence_breakers):
            raise bad("dry_sequence_breakers", "must be a list of non-empty strings")
        if self.n < 1:
            raise bad("n", "must be >= 1")
        if self.seed is not None and not _is_int(self.seed):
            raise bad("seed", "must be an int or None", "invalid_type")
        set_kinds = [k for k in CONSTRAINT_KINDS if getattr(self, k) is not None]
        for key in set_kinds:
            if not isinstance(getattr(self, key), str):
                raise bad(key, "must be a string", "invalid_type")
        if self.span_of is not None and not self.span_of.strip():
            raise bad("span_of", "must be a non-empty text (the source the output is a span of)")
        if len(set_kinds) > 1:
            raise RequestError(set_kinds[1], "invalid_value",
                               f"sampling_params may set only one of {', '.join(CONSTRAINT_KINDS)}; got {set_kinds}")

    @classmethod
    def from_dict(cls, d: "dict[str, Any] | SamplingParams | None") -> "SamplingParams":
        """Validated params from a user dict (SGLang names; `max_tokens`/`min_tokens` accepted). None values
        mean "the default"; unknown keys raise RequestError naming them."""
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return d
        if not isinstance(d, dict):
            raise RequestError("sampling_params", "invalid_type",
                               f"sampling_params must be a dict, got {type(d).__name__}")
        return cls(**normalize_fields(d))

    def replace(self, **changes: Any) -> "SamplingParams":
        """A copy with `changes` (user-style values, as in from_dict) applied and validated."""
        return dataclasses.replace(self, **normalize_fields(changes))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return bool(self.frequency_penalty or self.presence_penalty or self.repetition_penalty != 1.0)

    @property
    def constraint(self) -> tuple[str, str] | None:
        """(kind, spec) of the constraint, or None."""
        for kind in CONSTRAINT_KINDS:
            if getattr(self, kind) is not None:
                return kind, getattr(self, kind)
        return None

    def check_vocab(self, vocab_size: int) -> None:
        """Raises RequestError if logit_bias names a token outside a vocabulary of vocab_size ids (the sampler
        indexes by them). The one check, made by the engine and by the server before it submits."""
        top = max((t for t, _ in self.logit_bias), default=-1) if self.logit_bias else -1
        if top >= vocab_size:
            raise RequestError("logit_bias", "invalid_value",
                               f"logit_bias names token {top}; the vocabulary has {vocab_size} tokens "
                               f"(ids 0 to {vocab_size - 1})")

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from the defaults, as JSON-ready values (for a wire or a log)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v != f.default:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


FIELD_NAMES = frozenset(f.name for f in fields(SamplingParams))


def normalize_fields(d: dict[str, Any]) -> dict[str, Any]:
    """User-style sampling values -> SamplingParams field values: aliases resolved, None dropped, a stop string
    or list made a tuple, numbers made floats, a schema made JSON text. Unknown keys raise RequestError."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = ALIASES.get(key, key)
        if name not in FIELD_NAMES:
            import difflib
            close = difflib.get_close_matches(str(key), sorted(FIELD_NAMES | set(ALIASES)), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {sorted(FIELD_NAMES)}"
            raise RequestError(str(key), "unknown_param", f"unknown sampling_params key {key!r}{hint}")
        if value is not None:
            out[name] = value
    for key in ("stop", "stop_regex"):
        if isinstance(out.get(key), str):
            out[key] = (out[key],)
    for key in ("stop", "stop_token_ids", "stop_regex", "dry_sequence_breakers"):
        if key in out:
            if not isinstance(out[key], (list, tuple)):
                raise RequestError(key, "invalid_type", f"sampling_params[{key!r}] must be a list, got {out[key]!r}")
            out[key] = tuple(out[key])
    if "json_schema" in out:
        out["json_schema"] = json_schema_text(out["json_schema"])
    if isinstance(out.get("structural_tag"), (dict, list)):
        out["structural_tag"] = json.dumps(out["structural_tag"])
    if "logit_bias" in out:
        out["logit_bias"] = _logit_bias_pairs(out["logit_bias"])
    for key in _NUM_FIELDS + ("dry_multiplier",):
        if _is_int(out.get(key)):
            out[key] = float(out[key])
    return out


def _logit_bias_pairs(value: Any) -> tuple[tuple[int, float], ...] | None:
    """{token id (int or its decimal string): bias} or [[id, bias], ...] -> ((id, float bias), ...) by id; None
    when empty. Ids and values are checked by SamplingParams (the vocabulary size by the engine or server)."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        items = [tuple(p) for p in value]
    else:
        raise RequestError("logit_bias", "invalid_type",
                           f"sampling_params['logit_bias'] must be a dict {{token_id: bias}}, got {value!r}")
    pairs = {}
    for key, bias in items:
        try:
            tid = int(key) if not isinstance(key, (bool, float)) else None
        except (TypeError, ValueError):
            tid = None
        if tid is None:
            raise RequestError("logit_bias", "invalid_value",
                               f"sampling_params['logit_bias'] keys must be token ids, got {key!r}")
        pairs[tid] = float(bias) if _is_num(bias) else bias
    return tuple(sorted(pairs.items())) or None


# --- JSON Schema -----------------------------------------------------------------------------------------------
def json_schema_text(schema: Any) -> str:
    """The one conversion of a user's schema to the JSON text every entry point compiles: a JSON string (checked
    to parse) as given, anything else as `load_json_schema` reads it."""
    if isinstance(schema, str):
        load_json_schema(schema)
        return schema
    try:
        return json.dumps(load_json_schema(schema))
    except (TypeError, ValueError) as e:
        raise RequestError("json_schema", "invalid_type", f"json_schema dict is not JSON-serialisable: {e}") \
            from None


def load_json_schema(schema: Any) -> Any:
    """The one reading of a user's schema, shared by `json_schema_text` and the grammar compiler: a JSON string
    parsed, a dict as given, a pydantic model class via `model_json_schema()` with its objects closed (pydantic
    ignores undeclared keys unless `extra="allow"`, so generating them is wasted and unbounded)."""
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise RequestError("json_schema", "invalid_value", f"json_schema is not valid JSON: {e}") from None
    if isinstance(schema, dict):
        return schema
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        out = schema.model_json_schema()
        extra = (getattr(schema, "model_config", None) or {}).get("extra")
        return out if extra == "allow" else closed_schema(out)
    raise RequestError("json_schema", "invalid_type",
                       f"json_schema must be a dict, a JSON string or a pydantic model class, got {schema!r}")


def closed_schema(schema: Any) -> Any:
    """A copy of `schema` where every object that lists `properties` and says nothing about
    `additionalProperties` (or `patternProperties`) gets `additionalProperties: false`."""
    if isinstance(schema, list):
        return [closed_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed_schema(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


# --- requests ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenerateRequest:
    """One prompt (text or token ids) and how to continue it. `rid` is chosen by the caller or made here, so a
    request can be aborted before its first chunk; its `n` samples get ids `rid-0`, `rid-1`, ... when n > 1."""

    params: SamplingParams = field(default_factory=SamplingParams)
    text: str | None = None
    input_ids: tuple[int, ...] | None = None
    return_logprob: bool = False
    logprob_start_len: int | None = None    # None: no prompt logprobs; -1 likewise
    top_logprobs_num: int = 0
    # each output token's log-probability under the distribution it was chosen from (after the grammar's mask)
    return_constrained_logprob: bool = False
    stream: bool = False
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    lora_path: str | None = None            # the LoRA adapter (its name as loaded) to run under; None: the base

    def __post_init__(self) -> None:
        if self.lora_path is not None and (not isinstance(self.lora_path, str) or not self.lora_path):
            raise RequestError("lora_path", "invalid_type",
                               f"lora_path must be an adapter name (a non-empty str) or None, got {self.lora_path!r}")
        if not isinstance(self.params, SamplingParams):
            object.__setattr__(self, "params", SamplingParams.from_dict(self.params))
        if (self.text is None) == (self.input_ids is None):
            raise RequestError("prompt", "invalid_value", "a request takes exactly one of prompt text or input_ids")
        if self.text is not None and not isinstance(self.text, str):
            raise RequestError("prompt", "invalid_type", f"prompt must be a str, got {type(self.text).__name__}")
        if self.input_ids is not None:
            if not isinstance(self.input_ids, (list, tuple)):
                raise RequestError("input_ids", "invalid_type", "input_ids must be a list of ints")
            object.__setattr__(self, "input_ids", tuple(self.input_ids))
        if not isinstance(self.return_logprob, bool):
            raise RequestError("return_logprob", "invalid_type",
                               f"return_logprob must be a bool, got {self.return_logprob!r}")
        if not isinstance(self.return_constrained_logprob, bool):
            raise RequestError("return_constrained_logprob", "invalid_type",
                               f"return_constrained_logprob must be a bool, got {self.return_constrained_logprob!r}")
        if not _is_int(self.top_logprobs_num) or self.top_logprobs_num < 0:
            raise RequestError("top_logprobs_num", "invalid_value",
                               f"top_logprobs_num must be an int >= 0, got {self.top_logprobs_num!r}")
        if self.logprob_start_len is not None and not _is_int(self.logprob_start_len):
            raise RequestError("logprob_start_len", "invalid_type",
                               f"logprob_start_len must be an int or None, got {self.logprob_start_len!r}")

    def sample_ids(self) -> list[str]:
        """The request id of each of its n samples."""
        n = self.params.n
        return [self.rid] if n == 1 else [f"{self.rid}-{i}" for i in range(n)]


# --- outputs ----------------------------------------------------------------------------------------------------
class FinishKind(str, Enum):
    STOP = "stop"        # eos, a stop token or string, or the grammar's end
    LENGTH = "length"    # max_new_tokens or the context
    ABORT = "abort"      # aborted: see FinishReason.code


# FinishReason.code for aborts: who ended the request
ABORT_BY_CLIENT = "aborted"
ABORT_SHUTDOWN = "shutdown"
ABORT_INTERNAL = "internal_error"
ABORT_GRAMMAR = "grammar_rejected"


@dataclass(frozen=True)
class FinishReason:
    kind: FinishKind
    matched: int | str | None = None   # the stop token id or stop string that ended it
    message: str | None = None         # for aborts: why, for a person
    code: str | None = None            # for aborts: one of the ABORT_* codes, for a program

    @classmethod
    def stop(cls, matched: int | str | None = None) -> "FinishReason":
        return cls(FinishKind.STOP, matched)

    @classmethod
    def length(cls) -> "FinishReason":
        return cls(FinishKind.LENGTH)

    @classmethod
    def abort(cls, code: str, message: str) -> "FinishReason":
        return cls(FinishKind.ABORT, None, message, code)

    def to_dict(self) -> dict[str, Any]:
        """SGLang's shape: {"type", "matched"} plus "message" and "code" for aborts."""
        d: dict[str, Any] = {"type": self.kind.value, "matched": self.matched}
        if self.message:
            d["message"] = self.message
        if self.code:
            d["code"] = self.code
        return d


# (logprob, token_id, token_text); the logprob of a prompt's first token is None
TokenLogprob = tuple
# (logprob, token_id, token_text) of an output token under the distribution it was chosen from: the logits at
# temperature 1 after penalties, logit_bias and the grammar's mask, renormalised; 0.0 for a token the grammar
# forced (jump-forward). token_text is what the token adds to the output text (its bytes decoded in sequence, so
# a character split over tokens belongs to the token that completes it): the texts concatenate to the output
# text, followed by the text of a stop token that ended it (which the output leaves out).
ConstrainedLogprob = tuple
TopLogprobs = list   # of TokenLogprob, best first


# the counters a StreamChunk (totals so far) and a GenerateOutput (final) both carry, as meta_info reports them
OUTPUT_COUNTERS = ("prompt_tokens", "completion_tokens", "forced_tokens", "cached_tokens", "decode_passes",
                   "spec_accepted_tokens", "capped_values", "closed_at_budget")


def _counters(out: "StreamChunk | GenerateOutput") -> dict[str, Any]:
    return {"id": out.rid, **{name: getattr(out, name) for name in OUTPUT_COUNTERS}}


@dataclass(frozen=True)
class StreamChunk:
    """What one engine step added to one request. Fields named `new_*` and `text_delta` are increments since
    the previous chunk; `*_tokens` counts are totals so far. Prompt logprobs come once, in the first chunk."""

    rid: str
    text_delta: str
    new_token_ids: tuple[int, ...]
    new_token_logprobs: tuple[TokenLogprob, ...] = ()
    new_top_logprobs: tuple[TopLogprobs, ...] = ()
    input_token_logprobs: tuple[TokenLogprob, ...] = ()
    input_top_logprobs: tuple[TopLogprobs, ...] = ()
    new_token_constrained_logprobs: tuple[ConstrainedLogprob, ...] | None = None   # None: not asked for
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    forced_tokens: int = 0
    decode_passes: int = 0          # forward passes in which this request sampled or verified tokens
    spec_accepted_tokens: int = 0   # of completion_tokens, draft tokens accepted (speculative decoding)
    capped_values: int = 0          # values the grammar closed at a generation cap (JSON schema)
    closed_at_budget: bool = False  # the grammar's shortest completion spent the last tokens (close_at_budget)
    finish_reason: FinishReason | None = None
    ttft: float | None = None          # last chunk only: seconds from submission to the first output token
    e2e_latency: float | None = None   # last chunk only: seconds from submission to the end

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class GenerateOutput:
    """A finished request (one sample). `to_dict()` is the dict `Engine.generate` returns (SGLang's shape)."""

    rid: str
    text: str
    output_ids: tuple[int, ...]
    finish_reason: FinishReason
    prompt_tokens: int
    cached_tokens: int = 0
    forced_tokens: int = 0
    decode_passes: int = 0
    spec_accepted_tokens: int = 0
    capped_values: int = 0          # values the grammar closed at a generation cap: finished, but cut short
    closed_at_budget: bool = False  # ended by its grammar's shortest completion as max_new_tokens ran out
    input_token_logprobs: tuple[TokenLogprob, ...] | None = None   # None: not asked for
    input_top_logprobs: tuple[TopLogprobs, ...] | None = None
    output_token_logprobs: tuple[TokenLogprob, ...] | None = None
    output_top_logprobs: tuple[TopLogprobs, ...] | None = None
    output_token_constrained_logprobs: tuple[ConstrainedLogprob, ...] | None = None   # None: not asked for
    e2e_latency: float | None = None
    ttft: float | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    def meta_info(self) -> dict[str, Any]:
        """SGLang's `meta_info` of a finished request: counts, finish reason, and logprobs when asked for."""
        meta = {**_counters(self), "finish_reason": self.finish_reason.to_dict()}
        if self.e2e_latency is not None:
            meta["e2e_latency"] = self.e2e_latency
        if self.ttft is not None:
            meta["ttft"] = self.ttft
        if self.output_token_logprobs is not None:
            meta["input_token_logprobs"] = list(self.input_token_logprobs or ())
            meta["input_top_logprobs"] = list(self.input_top_logprobs or ())
            meta["output_token_logprobs"] = list(self.output_token_logprobs)
            meta["output_top_logprobs"] = list(self.output_top_logprobs or ())
        if self.output_token_constrained_logprobs is not None:
            meta["output_token_constrained_logprobs"] = list(self.output_token_constrained_logprobs)
        return meta

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "output_ids": list(self.output_ids), "meta_info": self.meta_info()}


def chunk_meta_info(chunk: StreamChunk, with_logprobs: bool) -> dict[str, Any]:
    """SGLang's `meta_info` of a stream chunk: counts so far, the finish reason on the last one, and with
    `with_logprobs` this chunk's logprob increments."""
    meta = {**_counters(chunk), "finish_reason": chunk.finish_reason.to_dict() if chunk.finish_reason else None}
    if with_logprobs:
        meta["input_token_logprobs"] = list(chunk.input_token_logprobs)
        meta["input_top_logprobs"] = list(chunk.input_top_logprobs)
        meta["output_token_logprobs"] = list(chunk.new_token_logprobs)
        meta["output_top_logprobs"] = list(chunk.new_top_logprobs)
    if chunk.new_token_constrained_logprobs is not None:
        meta["output_token_constrained_logprobs"] = list(chunk.new_token_constrained_logprobs)
    return meta


def chunk_to_dict(chunk: StreamChunk, with_logprobs: bool) -> dict[str, Any]:
    """A stream chunk in SGLang's dict shape (text and logprob lists are increments, counts are totals)."""
    return {"text": chunk.text_delta, "output_ids": list(chunk.new_token_ids),
            "meta_info": chunk_meta_info(chunk, with_logprobs)}


# --- the engine boundary --------------------------------------------------------------------------------------
@runtime_checkable
class EngineAPI(Protocol):
    """What the server and the language backends need of an engine; `Engine` and every test fake implement it
    (tests/test_engine_contract.py checks both).

    `submit` validates (raising RequestError before anything is queued) and queues one request; each of its n
    samples' chunks then arrive through its handle, in order, the last one carrying finish_reason. `abort` ends
    a request (every sample of it) wherever it is; an unknown or finished id is ignored."""

    tokenizer: Any
    max_context: int

    def submit(self, request: GenerateRequest, loop: Any = None) -> list["RequestStreamHandle"]:
        """Queues the request's n samples; with `loop` (the caller's asyncio event loop) their handles are
        async-iterable on it, without, iterable from a thread."""

    def abort(self, rid: str) -> None: ...


@runtime_checkable
class RequestStreamHandle(Protocol):
    """One queued sample. Iterate it (`for chunk in h`, or `async for` when submitted with an event loop) to
    get its StreamChunks; `output()` waits for the end and returns the GenerateOutput (at once, on any thread,
    once the last chunk has been read)."""

    rid: str

    def __iter__(self) -> Iterator[StreamChunk]: ...

    def __aiter__(self) -> AsyncIterator[StreamChunk]: ...

    def output(self) -> GenerateOutput: ...
