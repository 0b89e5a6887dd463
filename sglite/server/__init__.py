"""HTTP server: OpenAI-compatible API and SGLang's native /generate around one Engine.

    from sglite.server import create_app, ModelInfo, ServerThread
    app = create_app(engine, ModelInfo.from_engine(engine, name="my-model"), api_key=None)

Endpoints (all errors are `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status; a request the
engine refuses keeps its `RequestError`'s code and param, the latter as the client named it):
    POST /v1/chat/completions   messages via the model's chat template; max_tokens (max_completion_tokens) >= 1,
                                temperature, top_p, stop, seed, n, logprobs/top_logprobs, logit_bias, stream
                                (SSE, `[DONE]`), stream_options.include_usage, response_format (json_object |
                                json_schema, whose `strict: true` closes every object, as OpenAI's strict mode
                                does), tools + tool_choice (none | auto | required | a named function: calls are
                                generated under the functions' schemas, see tools.py), and SGLang's extras:
                                regex, json_schema, ebnf, top_k, min_p, repetition_penalty, min_tokens, ignore_eos,
                                stop_token_ids, stop_regex, skip_special_tokens, no_stop_trim. A `model` other
                                than the served name is a 404 model_not_found.
    POST /v1/completions        prompt (str | [str] | [int] | [[int]]), echo, logprobs (0-5), same extras
    GET  /v1/models
    POST /generate              SGLang's request body, every field of it carried out or refused by name
                                (sglang_compat.py); SGLang's stream format (native_api.py), so SGLang's own
                                frontend (`sgl.RuntimeEndpoint(url)`) runs against this server unchanged
    POST /abort_request         {"rid"}: ends a /generate request given that rid
    GET  /health, GET /get_model_info (/model_info), GET /get_server_info (/server_info), POST /flush_cache,
    GET  /metrics (Prometheus)

Files: app.py (routes, error rendering), bodies.py (request bodies), openai_api.py + openai_format.py,
tools.py + tool_reply.py (tool calling), native_api.py + sglang_compat.py, engine_client.py (the only code that
talks to the engine), sse.py, middleware.py (API key, body limit, status counts), metrics.py, launch.py
(`sglite serve`, ServerThread).
"""
from __future__ import annotations

from typing import Any

__all__ = ["create_app", "ModelInfo", "ServerThread"]


def __getattr__(name: str) -> Any:  # lazy: `import sglite.server` stays light
    if name == "create_app":
        from .app import create_app
        return create_app
    if name == "ModelInfo":
        from .model_info import ModelInfo
        return ModelInfo
    if name == "ServerThread":
        from .launch import ServerThread
        return ServerThread
    raise AttributeError(f"module 'sglite.server' has no attribute {name!r}")
