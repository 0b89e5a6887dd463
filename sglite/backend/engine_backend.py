"""EngineBackend: the shared logic of backends that speak `Engine.generate`'s dict API, in process (Runtime)
or over HTTP (RuntimeEndpoint). Subclasses supply `_generate`, `_generate_stream` and `tokenize`."""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Iterator

from ..lang.chat_template import ChatTemplate
from ..lang.choices import ChoicesDecision, ChoicesSamplingMethod
from ..lang.sampling import GenParams
from .base import Backend, Completion, Prompt


def _common_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class EngineBackend(Backend):
    @abstractmethod
    def _generate(self, body: dict[str, Any]) -> Any:
        """Engine.generate(**body) -> dict, or list of dicts for batched bodies."""

    @abstractmethod
    def _generate_stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Engine.generate(**body, stream=True): dicts whose `text` is the increment."""

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """The engine's tokenizer (sglite.runtime.tokenizer.Tokenizer or the same interface)."""

    def tokenize(self, text: str) -> list[int]:
        """Token ids exactly as the engine tokenizes a text prompt."""
        return self.tokenizer.encode(text)

    def chat_template(self) -> ChatTemplate:
        if getattr(self, "_template", None) is None:
            self._template = self.template_from_tokenizer(self.tokenizer)
        return self._template

    def _record(self, out: Any) -> Any:
        for item in out if isinstance(out, list) else [out]:
            self.usage.add(item.get("meta_info") or {})
        return out

    # --- Backend ------------------------------------------------------------------------------------------
    @staticmethod
    def _generate_body(prompt: Prompt, params: GenParams) -> dict[str, Any]:
        """Engine.generate's keywords: the sampling params as SGLang's dict (fields off their defaults)."""
        return {"prompt": prompt.text, "sampling_params": params.sampling.to_dict(), **params.request_options()}

    def generate(self, prompt: Prompt, params: GenParams) -> Completion:
        out = self._record(self._generate(self._generate_body(prompt, params)))
        return Completion(out["text"], out.get("meta_info") or {})

    def generate_stream(self, prompt: Prompt, params: GenParams) -> Iterator[Completion]:
        body = self._generate_body(prompt, params)
        last: dict[str, Any] = {}
        for chunk in self._generate_stream(body):
            last = chunk.get("meta_info") or last
            yield Completion(chunk.get("text", ""), last)
        self.usage.add(last)

    def commit_prefix(self, prompt: Prompt) -> None:
        self._record(self._generate({"prompt": prompt.text, "sampling_params": {"max_new_tokens": 0}}))

    def select(self, prompt: Prompt, choices: list[str], temperature: float,
               method: ChoicesSamplingMethod) -> ChoicesDecision:
        """Score every choice in one batched prefill over the cached prefix.

        BPE may merge the prompt's last token with a choice's first characters, so each choice's own tokens
        start where its tokenization (of prompt + choice) first differs from the prompt's; the request asks
        logprobs from the earliest such start and each choice drops the positions before its own start."""
        prefix_ids = self.tokenize(prompt.text)
        full = [self.tokenize(prompt.text + c) for c in choices]
        starts = [min(_common_len(prefix_ids, f), len(f) - 1) for f in full]
        start = min(starts)
        if prefix_ids:
            self.commit_prefix(prompt)
        outs = self._record(self._generate({
            "input_ids": full, "sampling_params": [{"max_new_tokens": 0} for _ in full],
            "return_logprob": True, "logprob_start_len": start}))
        own = [out["meta_info"]["input_token_logprobs"][s - start:] for out, s in zip(outs, starts)]
        normalized = []
        for toks in own:
            lps = [t[0] for t in toks if t[0] is not None]
            normalized.append(sum(lps) / len(lps) if lps else float("-inf"))
        unconditional = None
        if method.requires_unconditional_logprobs:
            tails = [f[s:] for f, s in zip(full, starts)]
            uouts = self._record(self._generate({
                "input_ids": tails, "sampling_params": [{"max_new_tokens": 0} for _ in tails],
                "return_logprob": True, "logprob_start_len": 0}))
            unconditional = [u["meta_info"]["input_token_logprobs"] for u in uouts]
        return method(choices=choices, normalized_prompt_logprobs=normalized, input_token_logprobs=own,
                      output_token_logprobs=[[] for _ in choices], unconditional_token_logprobs=unconditional)

    @staticmethod
    def template_from_tokenizer(tokenizer: Any) -> ChatTemplate:
        """The model's own chat template split into role blocks; a plain 'Role: ' layout without one."""
        if getattr(tokenizer, "chat_template", None):
            try:
                return ChatTemplate.from_renderer(tokenizer.apply_chat_template, name=getattr(tokenizer, "name", "model"))
            except Exception:   # noqa: BLE001 - templates that cannot be split fall back to ChatML
                return ChatTemplate.chatml()
        return ChatTemplate.plain()
