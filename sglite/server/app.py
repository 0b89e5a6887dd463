"""The FastAPI app: routes, error rendering, and the guard middleware, around one running Engine.

    app = create_app(engine, ModelInfo.from_engine(engine, name="my-model"), api_key=None)

Handlers only await engine streams (see engine_client.py); nothing here blocks the event loop."""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response

from sglite.protocol import GenerateRequest, SamplingParams

from .bodies import AbortBody, ChatCompletionRequest, CompletionRequest, GenerateBody, LoadLoraBody, UnloadLoraBody
from .engine_client import EngineClient
from .api_errors import APIError
from .limits import HEALTH_GENERATE_TIMEOUT_S
from .metrics import ServerMetrics
from .middleware import GuardMiddleware
from .model_info import ModelInfo
from .native_api import NativeServing
from .openai_api import OpenAIServing, lora_adapters

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


def create_app(engine: Any, model_info: ModelInfo | None = None, *, api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_pending: int | None = None) -> FastAPI:
    """An ASGI app serving `engine`: a `protocol.EngineAPI` whose handles can be iterated on the server's event
    loop (the real Engine with background=True), plus `flush_cache()` and, optionally, `get_stats()`.
    `max_pending`: engine samples in flight past which new requests get a 503 (None: no limit)."""
    info = model_info or ModelInfo.from_engine(engine)
    get_stats = getattr(engine, "get_stats", None)
    metrics = ServerMetrics(get_stats)
    client = EngineClient(engine, metrics, max_pending)
    openai = OpenAIServing(client, info)
    native = NativeServing(client, info)
    created = int(time.time())

    app = FastAPI(title="sglite", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine, app.state.model_info, app.state.metrics = engine, info, metrics
    app.add_middleware(GuardMiddleware, api_key=api_key, max_body_bytes=max_body_bytes, metrics=metrics)
    _install_error_handlers(app)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await openai.chat(await parse_body(request, ChatCompletionRequest), request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await openai.completions(await parse_body(request, CompletionRequest), request)

    @app.get("/v1/models")
    async def models() -> dict:
        """The base model, then each LoRA adapter (as vLLM lists them: `parent` is the base's id)."""
        base = {"id": info.name, "object": "model", "created": created, "owned_by": "sglite",
                "root": info.path or info.name, "parent": None, "max_model_len": info.max_context}
        adapters = [{**base, "id": name, "root": name, "parent": info.name} for name in lora_adapters(engine)]
        return {"object": "list", "data": [base, *adapters]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        listed = (await models())["data"]
        found = [m for m in listed if m["id"] == model_id]
        if not found:
            served = ", ".join(repr(m["id"]) for m in listed)
            raise APIError(404, f"model {model_id!r} does not exist; this server serves {served}",
                           param="model", code="model_not_found")
        return found[0]

    @app.post("/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        """SGLang's route: loads an adapter while requests run (its files are read off the event loop)."""
        body = await parse_body(request, LoadLoraBody)
        _lora_api(engine)
        try:
            await asyncio.to_thread(engine.load_lora_adapter, body.lora_name, body.lora_path)
        except ValueError as e:     # LoraError: a missing or malformed adapter, a name already loaded
            raise APIError(400, str(e), param="lora_path", code="invalid_lora_adapter") from None
        return JSONResponse({"success": True, "loaded_adapters": lora_adapters(engine)})

    @app.post("/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Response:
        body = await parse_body(request, UnloadLoraBody)
        _lora_api(engine)
        try:
            engine.unload_lora_adapter(body.lora_name)
        except ValueError as e:     # LoraError: unknown; LoraInUseError: requests hold it
            in_use = type(e).__name__ == "LoraInUseError"
            raise APIError(409 if in_use else 404 if body.lora_name not in lora_adapters(engine) else 400, str(e),
                           param="lora_name", code="lora_adapter_in_use" if in_use else "lora_adapter_not_found"
                           ) from None
        return JSONResponse({"success": True, "loaded_adapters": lora_adapters(engine)})

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        return await native.generate(await parse_body(request, GenerateBody), request)

    @app.get("/health")
    async def health() -> Response:
        return PlainTextResponse("ok")

    @app.get("/health_generate")
    async def health_generate() -> Response:
        """Generates one token: 200 once it comes, 503 when it does not within the timeout (a stuck engine)."""
        probe = GenerateRequest(input_ids=(0,), params=SamplingParams(max_new_tokens=1, temperature=0.0),
                                rid=f"health-{uuid.uuid4().hex}")
        try:
            streams = await asyncio.wait_for(client.start([probe]), HEALTH_GENERATE_TIMEOUT_S)
            await asyncio.wait_for(streams[0].finish(), HEALTH_GENERATE_TIMEOUT_S)
        except asyncio.TimeoutError:
            engine.abort(probe.rid)
            raise APIError(503, f"the engine generated no token within {HEALTH_GENERATE_TIMEOUT_S:g} s",
                           code="engine_stuck") from None
        return PlainTextResponse("ok")

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def get_model_info() -> dict:
        return native.model_info()

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def get_server_info() -> dict:
        stats = await asyncio.to_thread(get_stats) if get_stats else {}
        return {**native.model_info(), "stats": stats}

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        body = await parse_body(request, AbortBody)
        if body.abort_all:
            raise APIError(400, "abort_all is not supported: abort requests by rid", param="abort_all",
                           code="unsupported")
        native.abort(body.rid)
        return Response(status_code=200)

    @app.api_route("/flush_cache", methods=["POST", "GET"])
    async def flush_cache() -> Response:
        ok = await asyncio.to_thread(engine.flush_cache)  # takes the engine's lock; keep it off the event loop
        if ok is False:
            raise APIError(400, "cache not flushed: requests are still running; retry when the server is idle",
                           code="cache_busy")
        return JSONResponse({"success": True, "message": "cache flushed"})

    @app.get("/metrics")
    async def get_metrics() -> Response:
        body = await asyncio.to_thread(metrics.render)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


def _lora_api(engine: Any) -> None:
    if not callable(getattr(engine, "load_lora_adapter", None)):
        raise APIError(400, "this engine cannot load LoRA adapters", code="unsupported")


async def parse_body(request: Request, model: type[BaseModel]) -> Any:
    """The JSON body as `model`, whatever the Content-Type says (curl -d sends form encoding); 400 otherwise."""
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        detail = f"{e.msg} at character {e.pos}" if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise APIError(400, f"the request body is not valid JSON ({detail})", code="invalid_json") from None
    except RecursionError:
        raise _too_deep() from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_request")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_to_api_error(e.errors()) from None
    except RecursionError:
        raise _too_deep() from None


def _too_deep() -> APIError:
    return APIError(400, "the request body nests arrays or objects too deeply to read", code="invalid_json")


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return JSONResponse(validation_to_api_error(exc.errors()).body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(exc.status_code)
        err = APIError(exc.status_code, str(exc.detail), code=code)
        return JSONResponse(err.body(), status_code=exc.status_code, headers=getattr(exc, "headers", None))


def validation_to_api_error(errors: list[dict]) -> APIError:
    """pydantic's error list -> one 400 naming the first bad field, e.g. param 'messages[0].role'."""
    if not errors:
        return APIError(400, "invalid request body", code="invalid_request")
    e = errors[0]
    if e.get("type") == "json_invalid":
        detail = (e.get("ctx") or {}).get("error", "")
        return APIError(400, f"the request body is not valid JSON ({detail} at character {e['loc'][-1]})",
                        code="invalid_json")
    loc = [p for p in e.get("loc", ()) if p != "body"]
    # unions report every branch ('prompt.str', 'prompt.list[int]'); keep the field path only
    path = ""
    for p in loc:
        if isinstance(p, int):
            path += f"[{p}]"
        elif "[" in str(p) or p in ("str", "int", "float", "bool", "dict", "list"):
            break
        else:
            path += ("." if path else "") + str(p)
    if e.get("type") == "missing" and not path:
        return APIError(400, "the request body must be a JSON object", code="invalid_request")
    if e.get("type") == "extra_forbidden":
        return APIError(400, f"unrecognized request argument supplied: {path}", param=path,
                        code="unknown_parameter")
    if e.get("type") == "model_attributes_type" or (not path and e.get("type", "").endswith("_type")):
        return APIError(400, "the request body must be a JSON object", code="invalid_request")
    message = f"invalid value for '{path}': {e.get('msg')}" if path else str(e.get("msg"))
    if "input" in e and e.get("type") != "missing":
        message += f" (got {str(e['input'])[:80]!r})"
    return APIError(400, message, param=path or None, code="invalid_type" if "type" in e.get("type", "") else
                    "invalid_value")
