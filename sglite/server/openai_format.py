"""OpenAI response pieces built from engine results: logprobs in the chat and the legacy completions shapes,
usage counts, finish reasons, and the JSON schema a `response_format` asks for."""
from __future__ import annotations

from typing import Any

from sglite.protocol import closed_schema

from .bodies import ResponseFormat
from .engine_client import RequestStream
from .api_errors import bad_request
from .model_info import ModelInfo


class LogprobFormatter:
    """Engine logprob tuples `(logprob, token_id, ...)` -> OpenAI's logprobs objects."""

    def __init__(self, info: ModelInfo):
        self.info = info

    def chat(self, token_logprobs: list[tuple], top_logprobs: list[list[tuple]]) -> list[dict]:
        out = []
        for j, (lp, tid, *_) in enumerate(token_logprobs):
            entry = self._entry(tid, lp)
            alts = top_logprobs[j] if j < len(top_logprobs) and top_logprobs[j] else []
            entry["top_logprobs"] = [self._entry(t, l) for l, t, *_ in alts]
            out.append(entry)
        return out

    def _entry(self, token_id: int, logprob: float | None) -> dict:
        raw = self.info.token_bytes(token_id)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    def completion(self, pairs: list[tuple], tops: list[list[tuple]], offset: int) -> dict:
        tokens, token_logprobs, top_logprobs, text_offset = [], [], [], []
        for j, (lp, tid, *_) in enumerate(pairs):
            tok = self.info.token_bytes(tid).decode("utf-8", errors="replace")
            tokens.append(tok)
            token_logprobs.append(lp)
            alts = tops[j] if j < len(tops) and tops[j] else []
            top_logprobs.append({self.info.token_bytes(t).decode("utf-8", errors="replace"): l for l, t, *_ in alts}
                                if alts else None)
            text_offset.append(offset)
            offset += len(tok)
        return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
                "text_offset": text_offset}


def response_format_schema(fmt: ResponseFormat | None) -> dict[str, Any] | None:
    """The JSON schema a response_format asks for. `strict: true` means what it means to OpenAI: objects are
    closed (`closed_schema`: no properties beyond those listed), so the schema the openai SDK sends for a
    pydantic model (`chat.completions.parse(response_format=Model)`) compiles to the same grammar as
    `protocol.json_schema_text(Model)`. Without strict the schema is compiled as given (JSON Schema's own
    default: other properties allowed)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "object"}
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise bad_request("response_format of type 'json_schema' needs json_schema.schema",
                          param="response_format.json_schema")
    schema = fmt.json_schema.schema_
    return closed_schema(schema) if fmt.json_schema.strict else schema


def finish_reason(s: RequestStream) -> str:
    """OpenAI's reason: an output its grammar closed because max_tokens ran out (close_at_budget) is complete and
    valid, but it ended for the budget, so OpenAI's clients see `length` as they would from OpenAI."""
    if s.last.closed_at_budget:
        return "length"
    return s.last.finish_reason.kind.value


def matched_stop(s: RequestStream) -> Any:
    return s.last.finish_reason.matched


def usage(streams: list[RequestStream], per_prompt: int | None = None) -> dict[str, Any]:
    """OpenAI counts a prompt once however many choices it has."""
    per_prompt = per_prompt or len(streams)
    prompt = sum(s.last.prompt_tokens for s in streams[::per_prompt])
    completion = sum(s.last.completion_tokens for s in streams)
    cached = sum(s.last.cached_tokens for s in streams[::per_prompt])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}
