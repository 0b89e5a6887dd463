"""The HTTP request bodies the server accepts, as pydantic models. Unknown fields are rejected (400 naming the field)
rather than silently ignored, so a typo like `max_token` does not quietly fall back to a default.

Field names follow the OpenAI API; the SGLang extras (`regex`, `json_schema`, `top_k`, ...) sit beside them."""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SGLangExtras(_Body):
    """Sampling fields SGLang's OpenAI endpoints accept beyond OpenAI's own."""

    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    min_tokens: Optional[int] = None
    ignore_eos: Optional[bool] = None
    stop_token_ids: Optional[list[int]] = None
    skip_special_tokens: Optional[bool] = None
    no_stop_trim: Optional[bool] = None
    stop_regex: Optional[Union[str, list[str]]] = None
    regex: Optional[str] = None
    json_schema: Optional[Union[str, dict[str, Any]]] = None
    ebnf: Optional[str] = None                  # GBNF (or Lark)
    grammar: Optional[str] = None               # Lark
    structural_tag: Optional[Union[str, dict[str, Any]]] = None
    span_of: Optional[str] = None               # sglite's own: the output is a verbatim span of this text
    dry_multiplier: Optional[float] = None      # DRY, as llama.cpp's server names it
    dry_base: Optional[float] = None
    dry_allowed_length: Optional[int] = None
    dry_sequence_breakers: Optional[list[str]] = None
    close_at_budget: Optional[bool] = None
    # sglite's own: the texts a json_schema's grounded fields name (x-sglite-span / x-sglite-number)
    sources: Optional[dict[str, str]] = None


class StreamOptions(_Body):
    include_usage: bool = False


class _OpenAICommon(_SGLangExtras):
    model: Optional[str] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = None
    n: int = 1
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    frequency_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    logit_bias: Optional[dict[str, float]] = None
    user: Optional[str] = None


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: Optional[str] = None
    description: Optional[str] = None
    schema_: Optional[dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JSONSchemaFormat] = None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: Optional[str] = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, ...: carried through to the template
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Optional[Union[str, list[TextPart]]] = None


class FunctionDef(_Body):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDef


class ChatCompletionRequest(_OpenAICommon):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    response_format: Optional[ResponseFormat] = None
    tools: Optional[list[Tool]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None
    continue_final_message: bool = False


class CompletionRequest(_OpenAICommon):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    logprobs: Optional[int] = None
    echo: bool = False
    suffix: Optional[str] = None
    best_of: Optional[int] = None
    response_format: Optional[ResponseFormat] = None


class GenerateBody(BaseModel):
    """Native `/generate`: SGLang's GenerateReqInput (single request or a batch). The fields below are carried
    out; the others SGLang defines land in `model_extra` and are judged by sglang_compat.check_request_fields."""

    model_config = ConfigDict(extra="allow")
    text: Optional[Union[str, list[str]]] = None
    input_ids: Optional[Union[list[int], list[list[int]]]] = None
    sampling_params: Optional[Union[dict[str, Any], list[dict[str, Any]]]] = None
    return_logprob: Optional[Union[bool, list[bool]]] = False
    logprob_start_len: Optional[Union[int, list[int]]] = None
    top_logprobs_num: Optional[Union[int, list[int]]] = 0
    # sglite's own: meta_info's output_token_constrained_logprobs (sglite.protocol.ConstrainedLogprob)
    return_constrained_logprob: Optional[Union[bool, list[bool]]] = False
    # sglite's own: the texts sampling_params' json_schema grounded fields name (one mapping, or one per prompt)
    sources: Optional[Union[dict[str, str], list[dict[str, str]]]] = None
    return_text_in_logprobs: bool = False
    return_prompt_token_ids: bool = False
    stream: Optional[bool] = False
    rid: Optional[Union[str, list[str]]] = None
    lora_path: Optional[Union[str, list[Optional[str]]]] = None   # an adapter's name (per prompt in a batch)


class LoadLoraBody(_Body):
    """SGLang's `/load_lora_adapter`: an adapter to load under a name."""

    lora_name: str
    lora_path: str


class UnloadLoraBody(_Body):
    """SGLang's `/unload_lora_adapter`."""

    lora_name: str


class AbortBody(_Body):
    """SGLang's `/abort_request`: the rid a `/generate` request was given."""

    rid: str
    abort_all: bool = False
