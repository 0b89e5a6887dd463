"""EngineBackend: the shared logic of backends that run protocol `GenerateRequest`s on an sglite engine, in
process (Runtime, through `EngineAPI.submit`) or over HTTP (RuntimeEndpoint, through `/generate`). Subclasses
supply `_complete`, `_stream` and `tokenizer`; requests are typed up to that point, and a Completion's
`meta_info` is SGLang's dict, what programs read."""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Iterator

from ..lang.chat_template import ChatTemplate
from ..lang.choices import ChoicesDecision, ChoicesSamplingMethod
from ..lang.sampling import GenParams
from ..protocol import GenerateRequest, SamplingParams
from .base import Backend, Completion, Prompt

_PREFILL_ONLY = SamplingParams(max_new_tokens=0)


def _common_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class EngineBackend(Backend):
    constrained_logprobs = True
    @abstractmethod
    def _complete(self, requests: list[GenerateRequest]) -> list[Completion]:
        """Runs the requests (each with n=1) together; one Completion per request, in order. A request the
        engine refuses raises RequestError before any of them runs."""

    @abstractmethod
    def _stream(self, request: GenerateRequest) -> Iterator[Completion]:
        """One request's text increments, each with its meta_info so far; the last one finishes."""

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

    def _run(self, requests: list[GenerateRequest]) -> list[Completion]:
        outs = self._complete(requests)
        for out in outs:
            self.usage.add(out.meta_info)
        return outs

    # --- Backend ------------------------------------------------------------------------------------------
    def generate(self, prompt: Prompt, params: GenParams) -> Completion:
        return self._run([params.request(prompt.text)])[0]

    def generate_stream(self, prompt: Prompt, params: GenParams) -> Iterator[Completion]:
        last: dict[str, Any] = {}
        for chunk in self._stream(params.request(prompt.text)):
            last = chunk.meta_info or last
            yield Completion(chunk.text, last)
        self.usage.add(last)

    def commit_prefix(self, prompt: Prompt, lora_path: str | None = None) -> None:
        self._run([GenerateRequest(params=_PREFILL_ONLY, text=prompt.text, lora_path=lora_path)])

    def select(self, prompt: Prompt, choices: list[str], temperature: float,
               method: ChoicesSamplingMethod, lora_path: str | None = None) -> ChoicesDecision:
        """Score every choice in one batched prefill over the cached prefix.

        BPE may merge the prompt's last token with a choice's first characters, so each choice's own tokens
        start where its tokenization (of prompt + choice) first differs from the prompt's; the request asks
        logprobs from the earliest such start and each choice drops the positions before its own start."""
        prefix_ids = self.tokenize(prompt.text)
        full = [self.tokenize(prompt.text + c) for c in choices]
        starts = [min(_common_len(prefix_ids, f), len(f) - 1) for f in full]
        start = min(starts)
        if prefix_ids:
            self.commit_prefix(prompt, lora_path)
        outs = self._run([GenerateRequest(params=_PREFILL_ONLY, input_ids=f, return_logprob=True,
                                          logprob_start_len=start, lora_path=lora_path) for f in full])
        own = [out.meta_info["input_token_logprobs"][s - start:] for out, s in zip(outs, starts)]
        normalized = []
        for toks in own:
            lps = [t[0] for t in toks if t[0] is not None]
            normalized.append(sum(lps) / len(lps) if lps else float("-inf"))
        unconditional = None
        if method.requires_unconditional_logprobs:
            tails = [f[s:] for f, s in zip(full, starts)]
            uouts = self._run([GenerateRequest(params=_PREFILL_ONLY, input_ids=t, return_logprob=True,
                                               logprob_start_len=0, lora_path=lora_path) for t in tails])
            unconditional = [u.meta_info["input_token_logprobs"] for u in uouts]
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
