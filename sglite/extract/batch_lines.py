"""OpenAI batch lines and how they are answered: the input line's checks (each body as the server checks it),
the output line's shape, and `run_requests`, which sends each request to the server's app (over HTTP or in
process through ASGI) and yields each answer as it completes. Shared by the `sglite batch` command (batch.py)
and the Ray replicas that answer a shard (sglite.distributed.replica)."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any, NamedTuple

from .setup_error import SetupError

ROUTES = ("/v1/chat/completions", "/v1/completions")
RETRY_LATER = (502, 503, 504)   # the service, not the request: no line, --resume runs it again


class BatchRequest(NamedTuple):
    custom_id: str
    url: str
    body: dict[str, Any]
    where: str          # "input.jsonl:3", for messages


def load_requests(path: Path) -> list[BatchRequest]:
    """Every line of the batch file, each checked as the server would check its body; SetupError naming the
    first bad line."""
    from ..server.app import validation_to_api_error
    from ..server.bodies import ChatCompletionRequest, CompletionRequest
    from pydantic import ValidationError

    models = {"/v1/chat/completions": ChatCompletionRequest, "/v1/completions": CompletionRequest}
    out: list[BatchRequest] = []
    seen: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SetupError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SetupError(f"{where}: not JSON ({e})") from None
        if not isinstance(line, dict):
            raise SetupError(f"{where}: a batch line is an object with custom_id, method, url and body")
        missing = [k for k in ("custom_id", "method", "url", "body") if k not in line]
        if missing:
            raise SetupError(f"{where}: missing {', '.join(missing)}")
        cid, method, url, body = line["custom_id"], line["method"], line["url"], line["body"]
        if not isinstance(cid, str) or not cid:
            raise SetupError(f"{where}: custom_id must be a non-empty string")
        if cid in seen:
            raise SetupError(f"{where}: custom_id {cid!r} is also on {seen[cid]}; custom_ids must be unique")
        if method != "POST":
            raise SetupError(f"{where}: method must be POST, got {method!r}")
        if url not in models:
            raise SetupError(f"{where}: url must be one of {', '.join(ROUTES)}, got {url!r}")
        if not isinstance(body, dict):
            raise SetupError(f"{where}: body must be a JSON object")
        try:
            parsed = models[url].model_validate(body)
        except ValidationError as e:
            err = validation_to_api_error(e.errors())
            raise SetupError(f"{where}: body: {err.message}") from None
        if parsed.stream:
            raise SetupError(f"{where}: body: stream is not supported in a batch; remove it")
        seen[cid] = where
        out.append(BatchRequest(cid, url, body, where))
    if not out:
        raise SetupError(f"{path}: no requests in the batch file")
    return out


def output_line(req: BatchRequest, status: int, body: Any, request_id: str | None) -> dict[str, Any]:
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": req.custom_id,
            "response": {"status_code": status, "request_id": request_id or f"req_{uuid.uuid4().hex}",
                         "body": body}, "error": None}


def failed_output_line(req: BatchRequest, why: str) -> dict[str, Any]:
    """The output line of a request no replica could answer (OpenAI's batch error shape: no response)."""
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": req.custom_id, "response": None,
            "error": {"code": "replica_lost", "message": why}}


class Unanswered(NamedTuple):
    custom_id: str
    why: str


async def run_requests(client: Any, requests: list[BatchRequest], max_in_flight: int, drop_model: bool):
    """Yields an output line (or Unanswered) per request as each finishes. `client`: an httpx.AsyncClient at
    the server (in process or remote). `drop_model`: the in-process engine serves every request whatever
    model it names."""
    import httpx

    gate = asyncio.Semaphore(max_in_flight)

    async def one(req: BatchRequest) -> dict[str, Any] | Unanswered:
        body = {k: v for k, v in req.body.items() if not (drop_model and k == "model")}
        async with gate:
            try:
                r = await client.post(req.url, json=body, timeout=None)
            except httpx.HTTPError as e:
                return Unanswered(req.custom_id, f"{type(e).__name__}: {e}")
        if r.status_code in RETRY_LATER:
            return Unanswered(req.custom_id, f"HTTP {r.status_code}: {r.text[:200]}")
        try:
            payload = r.json()
        except ValueError:
            payload = {"error": {"message": r.text[:2000], "type": "server_error", "param": None, "code": None}}
        return output_line(req, r.status_code, payload, r.headers.get("x-request-id"))

    tasks = [asyncio.ensure_future(one(r)) for r in requests]
    try:
        for fut in asyncio.as_completed(tasks):
            yield await fut
    finally:
        for t in tasks:
            t.cancel()


def asgi_client(engine: Any) -> Any:
    """An httpx.AsyncClient at the server's app around `engine`, in this process (no socket)."""
    import httpx

    from ..server import ModelInfo, create_app
    app = create_app(engine, ModelInfo.from_engine(engine), max_body_bytes=64 * 1024 * 1024)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sglite")
