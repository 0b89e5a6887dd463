"""OpenAI: any OpenAI-compatible server (OpenAI, vLLM, SGLang, sglite) as a language backend, over httpx.

Chat models (default) get the program's role blocks as messages: a `gen` must open an assistant block.
Completion models (`is_chat_model=False`) get the raw text, and `select` scores choices with echoed prompt
log-probabilities (`echo=True, logprobs=1, max_tokens=0`), which vLLM, SGLang and sglite support. Chat APIs do
not return prompt log-probabilities, so `select` on a chat model raises instead of guessing.
Constraints go in the body fields of the server's flavour (`server`, CONSTRAINT_FIELDS): OpenAI itself takes
only `json_schema` (as `response_format`); vLLM takes `guided_regex`, `guided_grammar` (ebnf / grammar) and
`guided_json` (its extra_body fields); SGLang `regex`, `ebnf` and `json_schema`; sglite those and `grammar`,
`structural_tag`. A constraint the flavour lacks is refused before any request. Without `server`, a base URL on
api.openai.com is "openai" and any other "sglang"."""
from __future__ import annotations

import json
import os
from typing import Any, Iterator

import httpx

from ..grounding import GROUNDING_KEYWORDS
from ..lang.choices import ChoicesDecision, ChoicesSamplingMethod
from ..lang.sampling import GenParams
from ..protocol import CONSTRAINT_KINDS, OPENAI_NAMES
from .base import Backend, Completion, Prompt

# the SamplingParams fields an OpenAI-compatible server takes (vLLM and SGLang: the extras past OpenAI's own), sent
# only when set; constraints go by CONSTRAINT_FIELDS below
_SENT = ("max_new_tokens", "temperature", "top_p", "stop", "frequency_penalty", "presence_penalty", "seed", "top_k",
         "min_p", "repetition_penalty", "min_new_tokens", "ignore_eos", "stop_token_ids")
_PARAM_NAMES = {name: OPENAI_NAMES.get(name, name) for name in _SENT}   # our name -> OpenAI body name


# server flavour -> {constraint kind: body field}
CONSTRAINT_FIELDS: dict[str, dict[str, str]] = {
    "openai": {"json_schema": "response_format"},
    "vllm": {"regex": "guided_regex", "ebnf": "guided_grammar", "grammar": "guided_grammar",
             "json_schema": "guided_json"},
    "sglang": {"regex": "regex", "ebnf": "ebnf", "json_schema": "json_schema"},
    "sglite": {k: k for k in ("regex", "ebnf", "grammar", "json_schema", "structural_tag", "span_of")},
}


class OpenAIError(RuntimeError):
    pass


class OpenAI(Backend):
    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 is_chat_model: bool = True, server: str | None = None, timeout: float = 600.0,
                 client: httpx.Client | None = None):
        super().__init__()
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        if server is None:
            server = "openai" if httpx.URL(self.base_url).host == "api.openai.com" else "sglang"
        if server not in CONSTRAINT_FIELDS:
            raise ValueError(f"server must be one of {sorted(CONSTRAINT_FIELDS)} (the flavour that says how "
                             f"constraints are sent), got {server!r}")
        self.server = server
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.is_chat_model = is_chat_model
        self.client = client or httpx.Client(headers=headers, timeout=timeout,
                                             limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))
        self._headers = headers if client is not None else {}

    # --- requests -----------------------------------------------------------------------------------------
    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path}"

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.client.post(self._url(path), json=body, headers=self._headers)
        if r.status_code >= 400:
            raise OpenAIError(f"{path} -> HTTP {r.status_code}: {r.text[:500]}")
        return r.json()

    def _params(self, params: GenParams) -> dict[str, Any]:
        """The OpenAI body fields of the merged params: the fields off their defaults, and max_tokens always
        (OpenAI servers default to other limits). Logprob options are not sent."""
        if params.return_constrained_logprob:
            raise ValueError("an OpenAI-compatible server does not return constrained logprobs "
                             "(return_constrained_logprob); use the sglite runtime or RuntimeEndpoint")
        body: dict[str, Any] = {"max_tokens": params.sampling.max_new_tokens}
        for key, value in params.sampling.to_dict().items():
            if key in _PARAM_NAMES:
                body[_PARAM_NAMES[key]] = value
            elif key in CONSTRAINT_KINDS:
                body.update(self._constraint(key, value))
            elif key in ("skip_special_tokens", "no_stop_trim", "n"):
                continue
            else:
                raise ValueError(f"the OpenAI backend cannot send {key!r}")
        return body

    def _constraint(self, kind: str, value: str) -> dict[str, Any]:
        """The body field carrying constraint `kind` (its text, as SamplingParams holds it) on this server."""
        fields = CONSTRAINT_FIELDS[self.server]
        field = fields.get(kind)
        if kind == "json_schema" and self.server != "sglite" and any(k in value for k in GROUNDING_KEYWORDS):
            raise ValueError(f"the {self.server!r} server flavour does not enforce grounded fields (x-sglite-span, "
                             "x-sglite-number): it would ignore them; use the sglite runtime or an sglite server "
                             "(server='sglite'), or drop sources=")
        if field is None:
            able = sorted(f for f, kinds in CONSTRAINT_FIELDS.items() if kind in kinds)
            raise ValueError(f"the {self.server!r} server flavour has no {kind}-constrained decoding (it takes "
                             f"{', '.join(sorted(fields))}); pass server= one of {able} if {self.base_url} is "
                             "such a server")
        if field == "response_format":
            return {field: {"type": "json_schema", "json_schema": {"name": "output", "schema": json.loads(value)}}}
        if field == "guided_json":
            return {field: json.loads(value)}
        return {field: value}

    def _request(self, prompt: Prompt, params: GenParams) -> tuple[str, dict[str, Any]]:
        # an adapter the server loaded is a model of its own there (vLLM, SGLang and sglite list it in /v1/models)
        body = {"model": params.lora_path or self.model, **self._params(params)}
        if self.is_chat_model:
            msgs = list(prompt.messages)
            if not msgs or msgs[-1]["role"] != "assistant" or msgs[-1]["content"]:
                raise ValueError("a chat model can only generate at the start of an assistant block: write "
                                 "s += sgl.assistant(sgl.gen(...)), or use is_chat_model=False for a completion model")
            body["messages"] = msgs[:-1]
            return "chat/completions", body
        body["prompt"] = prompt.text
        return "completions", body

    @staticmethod
    def _meta(out: dict[str, Any], finish: Any) -> dict[str, Any]:
        usage = out.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return {"id": out.get("id"), "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "cached_tokens": details.get("cached_tokens") or 0,
                "finish_reason": {"type": finish, "matched": None}}

    # --- Backend ------------------------------------------------------------------------------------------
    def generate(self, prompt: Prompt, params: GenParams) -> Completion:
        path, body = self._request(prompt, params)
        out = self._post(path, body)
        choice = out["choices"][0]
        text = choice["message"]["content"] if self.is_chat_model else choice["text"]
        meta = self._meta(out, choice.get("finish_reason"))
        self.usage.add(meta)
        return Completion(text or "", meta)

    def generate_stream(self, prompt: Prompt, params: GenParams) -> Iterator[Completion]:
        path, body = self._request(prompt, params)
        body.update(stream=True, stream_options={"include_usage": True})
        meta: dict[str, Any] = {}
        with self.client.stream("POST", self._url(path), json=body, headers=self._headers) as r:
            if r.status_code >= 400:
                raise OpenAIError(f"{path} -> HTTP {r.status_code}: {r.read()[:500]!r}")
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    meta = self._meta(chunk, meta.get("finish_reason", {}).get("type"))
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") if self.is_chat_model else choice.get("text")
                    if choice.get("finish_reason"):
                        meta.setdefault("finish_reason", {"type": choice["finish_reason"], "matched": None})
                    if piece:
                        yield Completion(piece, {})
        self.usage.add(meta)
        yield Completion("", meta)

    def select(self, prompt: Prompt, choices: list[str], temperature: float,
               method: ChoicesSamplingMethod, lora_path: str | None = None) -> ChoicesDecision:
        if self.is_chat_model:
            raise NotImplementedError(
                "select needs prompt log-probabilities, which chat completion APIs do not return; use "
                "OpenAI(..., is_chat_model=False) with a server that supports echo+logprobs (vLLM, SGLang, "
                "sglite), or a Runtime / RuntimeEndpoint backend")
        if method.requires_unconditional_logprobs:
            raise NotImplementedError("unconditional_likelihood_normalized is not supported by the OpenAI backend")
        out = self._post("completions", {"model": lora_path or self.model, "prompt": [prompt.text + c for c in choices],
                                         "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0})
        self.usage.add(self._meta(out, "length"))
        by_index = sorted(out["choices"], key=lambda c: c.get("index", 0))
        cut = len(prompt.text)
        own_all, normalized = [], []
        for choice in by_index:
            lp = choice.get("logprobs") or {}
            tokens, lps, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
            if not tokens or offsets is None:
                raise OpenAIError("the server did not echo prompt logprobs (echo=True, logprobs=1); select "
                                  "cannot score choices")
            # a choice's tokens: those ending past the prompt (a token spanning the boundary counts)
            own = [(lps[i], None, tokens[i]) for i in range(len(tokens))
                   if offsets[i] + len(tokens[i]) > cut and lps[i] is not None]
            own_all.append(own)
            normalized.append(sum(t[0] for t in own) / len(own) if own else float("-inf"))
        return method(choices=choices, normalized_prompt_logprobs=normalized, input_token_logprobs=own_all,
                      output_token_logprobs=[[] for _ in choices])

    def shutdown(self) -> None:
        self.client.close()
