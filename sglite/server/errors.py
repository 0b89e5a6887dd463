"""HTTP errors with OpenAI's body shape: {"error": {"message", "type", "param", "code"}}.

Every 4xx the server sends goes through `APIError`, so clients (the `openai` package included) can read
`message` and `param` the same way whatever went wrong."""
from __future__ import annotations

import json
import re
from typing import Any

# engine / SGLang parameter names -> the OpenAI request field a client actually sent
OPENAI_PARAM_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}

_SAMPLING_KEYS = (
    "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "stop_token_ids", "stop", "ignore_eos", "skip_special_tokens",
    "no_stop_trim", "seed", "regex", "json_schema", "ebnf", "n",
)

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          405: "invalid_request_error", 413: "invalid_request_error", 503: "server_error"}


class APIError(Exception):
    """Raised anywhere in a handler; rendered as an OpenAI-style JSON error with `status`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.headers = headers
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def from_value_error(err: ValueError, prompt_param: str = "prompt", constraint: str | None = None,
                     openai_names: bool = True) -> APIError:
    """A 400 for a ValueError the engine (or grammar compiler) raised before queuing a request.
    The engine names the offending key in its message (`sampling_params['top_p'] must be ...`); we surface it
    as `param`. Grammar compile errors name no key: they get the request's `constraint` key."""
    message = str(err) or type(err).__name__
    param = None
    named = re.search(r"sampling_params\[['\"](\w+)['\"]\]", message) or \
        re.search(r"unknown sampling_params key\(s\) \[['\"](\w+)", message)
    if named:
        param = named.group(1)
    elif "exceeds the KV pool" in message:
        param = "max_new_tokens"
    elif constraint is not None and (type(err) is not ValueError or
                                     re.search(r"compil|constrained|grammar|schema|regex", message, re.I)):
        param = constraint  # GrammarError / UnsupportedSchemaError from the compiler
    elif re.search(r"\bprompt\b|context|input_ids", message):
        param = prompt_param
    else:
        head = message.split("; known")[0]
        for key in sorted(_SAMPLING_KEYS, key=len, reverse=True):
            if re.search(rf"(?<![A-Za-z_]){re.escape(key)}(?![A-Za-z_])", head):
                param = key
                break
    if openai_names and param is not None:
        param = OPENAI_PARAM_NAMES.get(param, param)
    code = "context_length_exceeded" if re.search(r"context holds|exceeds the KV pool", message) else \
        (type(err).__name__ if type(err) is not ValueError else "invalid_value")
    return APIError(400, message, param=param, code=code)
