"""Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer streams and hide client disconnects).

`GuardMiddleware` runs before routing: bearer-token check (401), request body size limit (413), and a count
of responses by path and status code."""
from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

from starlette.exceptions import HTTPException

from .api_errors import APIError
from .metrics import ServerMetrics

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})  # the liveness probe needs no key; /health_generate runs the model, so it does
KNOWN_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/models", "/generate", "/health",
                         "/health_generate", "/get_model_info", "/flush_cache", "/metrics", "/get_server_info"})


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body passes the limit; FastAPI re-raises HTTPExceptions from body
    parsing, so the app's exception handler renders it as a 413."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body is larger than the server's limit of {limit} bytes; send a shorter "
                         "prompt or start the server with a larger --max-body-bytes")


class GuardMiddleware:
    def __init__(self, app: Callable, *, api_key: str | None, max_body_bytes: int, metrics: ServerMetrics):
        self.app = app
        self.api_key = api_key
        self._key_bytes = api_key.encode("utf-8") if api_key is not None else b""
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        status = {"code": 0, "started": False}

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        try:
            if self.api_key is not None and path not in OPEN_PATHS and not self._authorized(scope):
                await _send_error(counting_send, APIError(
                    401, "missing or wrong API key: send the header 'Authorization: Bearer <key>' with the key the "
                    "server was started with (--api-key)", code="invalid_api_key"))
                return
            headers = dict(scope.get("headers") or [])
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                await _send_error(counting_send, self._too_large())
                return
            await self.app(scope, self._limited(receive), counting_send)
        except BodyTooLarge:
            if not status["started"]:
                await _send_error(counting_send, self._too_large())
        finally:
            label = path if path in KNOWN_PATHS else "other"
            self.metrics.http_requests.labels(path=label, code=str(status["code"] or 499)).inc()

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                # header bytes against the key's UTF-8 bytes: hmac compares str only when both are ASCII
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key_bytes)
        return False

    def _limited(self, receive: Receive) -> Receive:
        """Counts body bytes as they arrive (chunked uploads have no Content-Length)."""
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message
        return wrapped

    def _too_large(self) -> APIError:
        return APIError(413, f"request body is larger than the server's limit of {self.max_body_bytes} bytes; "
                        "send a shorter prompt or start the server with a larger --max-body-bytes",
                        code="request_too_large")


async def _send_error(send: Send, err: APIError) -> None:
    body = err.body_bytes()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if err.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
