"""A scripted stand-in for `Engine` with the same generate() dict API, for interpreter tests.

Tokens are words (with their leading space) and single punctuation characters, so a prompt that ends inside a
word merges with a choice, as BPE does. Completions come from `respond(prompt, sampling_params)`; the logprob
of a token is 0 if its stripped text is in `liked`, else -5 (or `score(context, token_text)` when given)."""
from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable

TOKEN_RE = re.compile(r"<\|[a-z_]+\|>| ?\w+|\s|[^\w\s]")


class FakeTokenizer:
    chat_template = None
    name = "fake"

    def __init__(self):
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        out = []
        with self._lock:
            for piece in TOKEN_RE.findall(text):
                if piece not in self._ids:
                    self._ids[piece] = len(self._texts)
                    self._texts.append(piece)
                out.append(self._ids[piece])
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self._texts[i] for i in ids)


class FakeEngine:
    def __init__(self, respond: Callable[[str, dict], str] | None = None, liked: set[str] | None = None,
                 score: Callable[[str, str], float] | None = None, latency: float = 0.0,
                 fail_on: str | None = None):
        self.tokenizer = FakeTokenizer()
        self.respond = respond or (lambda prompt, sp: "ok")
        self.liked = liked or set()
        self.score = score
        self.latency = latency
        self.fail_on = fail_on       # prompts containing this raise
        self.calls: list[dict[str, Any]] = []
        self.cache: list[tuple[int, ...]] = []
        self._lock = threading.Lock()

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for seq in self.cache:
            n = 0
            while n < min(len(seq), len(ids)) and seq[n] == ids[n]:
                n += 1
            best = max(best, n)
        return best

    def _logprob(self, context: list[int], tok: int) -> float:
        text = self.tokenizer.decode([tok])
        if self.score is not None:
            return self.score(self.tokenizer.decode(context), text)
        return 0.0 if text.strip() in self.liked else -5.0

    def _one(self, prompt: str | None, ids: list[int] | None, sp: dict, return_logprob: bool,
             logprob_start_len: int | None) -> dict[str, Any]:
        if ids is None:
            ids = self.tokenizer.encode(prompt)
        text_in = self.tokenizer.decode(ids)
        if self.fail_on and self.fail_on in text_in:
            raise RuntimeError(f"scripted failure on {self.fail_on!r}")
        start = time.monotonic()
        if self.latency:
            time.sleep(self.latency)
        max_new = sp.get("max_new_tokens", 128)
        out_text = "" if max_new == 0 else self.respond(text_in, sp)
        with self._lock:
            cached = self._cached(ids)
            self.cache.append(tuple(ids) + tuple(self.tokenizer.encode(out_text)))
            self.calls.append({"prompt": text_in, "sampling_params": dict(sp), "start": start,
                               "end": time.monotonic(), "logprob_start_len": logprob_start_len})
        meta = {"prompt_tokens": len(ids), "cached_tokens": cached,
                "completion_tokens": len(self.tokenizer.encode(out_text)),
                "finish_reason": {"type": "length" if max_new == 0 else "stop", "matched": None}}
        if return_logprob:
            s = logprob_start_len or 0
            meta["input_token_logprobs"] = [
                (None if i == 0 else self._logprob(ids[:i], ids[i]), ids[i], self.tokenizer.decode([ids[i]]))
                for i in range(s, len(ids))]
            meta["output_token_logprobs"] = []
        return {"text": out_text, "output_ids": self.tokenizer.encode(out_text), "meta_info": meta}

    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False,
                 logprob_start_len=None, top_logprobs_num=0, stream=False):
        batched = isinstance(prompt, list) or (input_ids is not None and input_ids and isinstance(input_ids[0], list))
        if batched:
            n = len(prompt) if prompt is not None else len(input_ids)
            sps = sampling_params if isinstance(sampling_params, list) else [sampling_params or {}] * n
            with self._lock:
                self.calls.append({"batch": n})
            return [self._one(prompt[i] if prompt is not None else None,
                              input_ids[i] if input_ids is not None else None, sps[i], return_logprob,
                              logprob_start_len) for i in range(n)]
        out = self._one(prompt, input_ids, sampling_params or {}, return_logprob, logprob_start_len)
        if not stream:
            return out
        return self._stream(out)

    def _stream(self, out):
        pieces = TOKEN_RE.findall(out["text"])
        for i, piece in enumerate(pieces):
            yield {"text": piece, "meta_info": out["meta_info"] if i == len(pieces) - 1 else {}}

    def flush_cache(self) -> bool:
        self.cache.clear()
        return True

    def get_stats(self) -> dict:
        return {"requests": len(self.calls)}

    def gen_calls(self) -> list[dict]:
        return [c for c in self.calls if "prompt" in c and c["sampling_params"].get("max_new_tokens") != 0]

    def prefill_calls(self) -> list[dict]:
        return [c for c in self.calls if "prompt" in c and c["sampling_params"].get("max_new_tokens") == 0
                and c["logprob_start_len"] is None]
