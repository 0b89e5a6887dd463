"""HTTP errors with OpenAI's body shape: {"error": {"message", "type", "param", "code"}}.

Every 4xx the server sends goes through `APIError`, so clients (the `openai` package included) can read
`message` and `param` the same way whatever went wrong. A request the engine or `SamplingParams` refuses
arrives as `protocol.RequestError`, whose `param` and `code` are used as they are (renamed to the field the
client sent); no layer reads an error's message text."""
from __future__ import annotations

import json
from typing import Any, Mapping

from sglite.protocol import OPENAI_NAMES, RequestError

# engine / SGLang parameter names -> the OpenAI request field a client actually sent
OPENAI_PARAM_NAMES = OPENAI_NAMES

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


def from_request_error(err: RequestError, names: Mapping[str, str] | None = None) -> APIError:
    """The 400 for a refused request: its param as the client named it (`names`: engine name -> request field,
    e.g. max_new_tokens -> max_tokens, prompt -> messages) and its code."""
    param = (names or {}).get(err.param, err.param) if err.param is not None else None
    return APIError(400, err.message, param=param, code=err.code)
