"""RuntimeEndpoint: an sglite (or SGLang) server's native `/generate` API as a language backend.

select needs the exact tokenization of prompt + choice; the tokenizer named by the server's /get_model_info is
loaded locally (or pass `tokenizer=`)."""
from __future__ import annotations

import json
from typing import Any, Iterator

import httpx

from ..lang.chat_template import ChatTemplate
from ..protocol import GenerateRequest, RequestError
from .base import Completion
from .engine_backend import EngineBackend


class ServerError(RuntimeError):
    """The server answered with an error; the message is the server's."""


class ServerRequestError(RequestError):
    """The server refused the request (HTTP 400 naming a field): the same RequestError the in-process engine
    raises, so a program catches one type whichever backend runs it."""


class RuntimeEndpoint(EngineBackend):
    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 600.0,
                 tokenizer: Any = None, client: httpx.Client | None = None):
        super().__init__()
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                             limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))
        self._tokenizer = tokenizer
        self._template: ChatTemplate | None = None
        self._info: dict[str, Any] | None = None

    # --- HTTP ---------------------------------------------------------------------------------------------
    @staticmethod
    def _body(requests: list[GenerateRequest]) -> dict[str, Any]:
        """/generate's body (SGLang's GenerateReqInput) for requests that share their logprob options; more
        than one request makes a batched body."""
        first = requests[0]
        options = {"return_logprob": first.return_logprob, "logprob_start_len": first.logprob_start_len,
                   "top_logprobs_num": first.top_logprobs_num,
                   "return_constrained_logprob": first.return_constrained_logprob}
        for r in requests[1:]:
            if (r.return_logprob, r.logprob_start_len, r.top_logprobs_num,
                    r.return_constrained_logprob) != tuple(options.values()):
                raise ValueError("a batched /generate body takes one set of logprob options")
        key = "text" if first.text is not None else "input_ids"
        prompts = [r.text if key == "text" else list(r.input_ids) for r in requests]
        params = [r.params.to_dict() for r in requests]
        body = {key: prompts if len(requests) > 1 else prompts[0],
                "sampling_params": params if len(requests) > 1 else params[0]}
        if first.return_logprob:
            body["return_logprob"] = True
        if first.logprob_start_len is not None:
            body["logprob_start_len"] = first.logprob_start_len
        if first.top_logprobs_num:
            body["top_logprobs_num"] = first.top_logprobs_num
        if first.return_constrained_logprob:
            body["return_constrained_logprob"] = True   # an sglite server's own field
        loras = [r.lora_path for r in requests]
        if any(loras):
            body["lora_path"] = loras if len(requests) > 1 else loras[0]
        return body

    @staticmethod
    def _check(r: httpx.Response) -> None:
        if r.status_code >= 400:
            try:
                detail = r.json().get("error", r.text)
            except ValueError:
                detail = r.text
            msg = detail.get("message", detail) if isinstance(detail, dict) else detail
            if r.status_code == 400 and isinstance(detail, dict) and detail.get("code"):
                raise ServerRequestError(detail.get("param"), detail["code"],
                                         f"{r.request.url.path} -> HTTP 400: {msg}")
            raise ServerError(f"{r.request.url.path} -> HTTP {r.status_code}: {msg}")

    def _complete(self, requests: list[GenerateRequest]) -> list[Completion]:
        r = self.client.post("/generate", json=self._body(requests))
        self._check(r)
        outs = r.json()
        return [Completion(o["text"], o.get("meta_info") or {}) for o in (outs if isinstance(outs, list) else [outs])]

    def _stream(self, request: GenerateRequest) -> Iterator[Completion]:
        """The server's events (SGLang's format: each holds the text so far) as increments."""
        seen = 0
        for chunk in self._generate_events(self._body([request])):
            text = chunk.get("text") or ""
            yield Completion(text[seen:], chunk.get("meta_info") or {})
            seen = len(text)

    def _generate_events(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        with self.client.stream("POST", "/generate", json={**body, "stream": True}) as r:
            if r.status_code >= 400:
                r.read()
                self._check(r)
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise ServerError(f"/generate stream: {chunk['error']}")
                yield chunk

    def get_model_info(self) -> dict[str, Any]:
        if self._info is None:
            r = self.client.get("/get_model_info")
            self._check(r)
            self._info = r.json()
        return self._info

    # --- tokenizer and template ---------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from ..runtime.tokenizer import load_tokenizer
            path = self.get_model_info().get("tokenizer_path")
            try:
                self._tokenizer = load_tokenizer(None if path in (None, "default") else path)
            except Exception as e:   # noqa: BLE001
                raise RuntimeError(f"cannot load the server's tokenizer {path!r} locally ({e}); pass "
                                   f"RuntimeEndpoint(url, tokenizer=...)") from e
        return self._tokenizer

    def flush_cache(self) -> bool:
        r = self.client.post("/flush_cache")
        return r.status_code < 400

    def get_server_info(self) -> dict[str, Any]:
        r = self.client.get("/get_server_info")
        self._check(r)
        return r.json()

    def shutdown(self) -> None:
        self.client.close()
