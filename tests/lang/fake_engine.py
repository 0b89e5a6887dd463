"""A scripted engine for interpreter tests. It implements `sglite.protocol.EngineAPI` like the real Engine (and
runs under tests/test_engine_contract.py), so the language reaches it through `submit` exactly as it reaches the
real one.

Tokens are words (with their leading space) and single punctuation characters, so a prompt that ends inside a
word merges with a choice, as BPE does. A request's completion is `respond(prompt, sampling_params)` (the
params as SGLang's dict of the fields off their defaults), emitted one token per step on the engine's thread,
no earlier than `latency` seconds after submission, then ended by EOS (with `ignore_eos`, filler words follow
until max_new_tokens). The logprob of a prompt token is 0 if its stripped text is in `liked`, else -5 (or
`score(context, token_text)` when given). `calls` records each request; `cache` the sequences it has seen, so
`cached_tokens` counts the longest shared prefix as a radix cache would."""
from __future__ import annotations

import asyncio
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sglite.protocol import (ABORT_SHUTDOWN, FinishReason, GenerateOutput, GenerateRequest,
                             RequestError, StreamChunk)
from tests.server.fake_engine import FakeHandle, mark_aborted

TOKEN_RE = re.compile(r"<\|[a-z_]+\|>| ?\w+|\s|[^\w\s]")
FILLER = " more"


class FakeTokenizer:
    chat_template = None
    name = "fake"

    def __init__(self):
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []
        self._lock = threading.Lock()

    @property
    def vocab_size(self) -> int:
        return len(self._texts)

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


@dataclass
class _Sample:
    request: GenerateRequest
    rid: str
    ids: list[int]
    script: list[int]                  # the scripted completion's tokens
    handle: FakeHandle
    call: dict[str, Any]               # this request's entry in FakeEngine.calls
    ready_at: float                    # monotonic time before which it emits nothing
    cached: int
    out: list[int] = field(default_factory=list)
    abort: FinishReason | None = None
    started: bool = False              # its first chunk (the one with prompt logprobs) was pushed


class FakeEngine:
    def __init__(self, respond: Callable[[str, dict], str] | None = None, liked: set[str] | None = None,
                 score: Callable[[str, str], float] | None = None, latency: float = 0.0,
                 fail_on: str | None = None, max_context: int = 4096, step_s: float = 0.001):
        self.tokenizer = FakeTokenizer()
        self._filler = self.tokenizer.encode(FILLER)[0]
        self.max_context = max_context
        self.respond = respond or (lambda prompt, sp: "ok")
        self.liked = liked or set()
        self.score = score
        self.latency = latency
        self.step_s = step_s
        self.fail_on = fail_on       # prompts containing this raise
        self.calls: list[dict[str, Any]] = []
        self.cache: list[tuple[int, ...]] = []
        self._running: dict[str, _Sample] = {}
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- EngineAPI ------------------------------------------------------------------------------------------
    def submit(self, request: GenerateRequest, loop: asyncio.AbstractEventLoop | None = None) -> list[FakeHandle]:
        if self._closed:
            raise RuntimeError("the engine is shut down")
        ids = list(request.input_ids) if request.input_ids is not None else self.tokenizer.encode(request.text)
        param = "prompt" if request.text is not None else "input_ids"
        if not ids:
            raise RequestError(param, "invalid_value", "the prompt is empty")
        if any(not 0 <= t < self.tokenizer.vocab_size for t in ids):
            raise RequestError("input_ids", "invalid_value", "input_ids holds ids outside the vocabulary")
        if len(ids) >= self.max_context:
            raise RequestError(param, "context_length_exceeded",
                               f"the prompt has {len(ids)} tokens; the context holds {self.max_context}")
        if request.params.regex is not None:   # Python's re stands in for the grammar compiler
            try:
                re.compile(request.params.regex)
            except re.error as e:
                raise RequestError("regex", "invalid_grammar", f"regex does not compile: {e}") from None
        text_in = self.tokenizer.decode(ids)
        if self.fail_on and self.fail_on in text_in:
            raise RuntimeError(f"scripted failure on {self.fail_on!r}")
        sp = request.params.to_dict()
        script = [] if request.params.max_new_tokens == 0 else self.tokenizer.encode(self.respond(text_in, sp))
        now = time.monotonic()
        samples = []
        with self._wake:
            if any(r in self._running for r in request.sample_ids()):
                raise RequestError("rid", "invalid_value", f"request id {request.rid!r} is already in flight")
            for rid in request.sample_ids():
                call = {"prompt": text_in, "sampling_params": sp, "start": now, "end": None,
                        "logprob_start_len": request.logprob_start_len}
                self.calls.append(call)
                samples.append(_Sample(request, rid, ids, script, FakeHandle(rid, loop), call, now + self.latency,
                                       self._cached(ids)))
                self.cache.append(tuple(ids) + tuple(script))
            self._running.update((s.rid, s) for s in samples)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True)
                self._thread.start()
            self._wake.notify()
        return [s.handle for s in samples]

    def abort(self, rid: str) -> None:
        with self._wake:
            mark_aborted(self._running.values(), rid)

    # --- the rest of Engine's surface -----------------------------------------------------------------------
    def flush_cache(self) -> bool:
        self.cache.clear()
        return True

    def get_stats(self) -> dict:
        return {"requests": len(self.calls)}

    def shutdown(self) -> None:
        with self._wake:
            self._closed = True
            for s in self._running.values():
                s.abort = s.abort or FinishReason.abort(ABORT_SHUTDOWN, "engine shut down")
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- what tests read ------------------------------------------------------------------------------------
    def gen_calls(self) -> list[dict]:
        return [c for c in self.calls if c["sampling_params"].get("max_new_tokens") != 0]

    def prefill_calls(self) -> list[dict]:
        return [c for c in self.calls if c["sampling_params"].get("max_new_tokens") == 0
                and c["logprob_start_len"] is None]

    # --- the "scheduler" ------------------------------------------------------------------------------------
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

    def _token_lp(self, t: int) -> tuple:
        return (0.0, t, self.tokenizer.decode([t]))

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._running and not self._closed:
                    self._wake.wait()
                if not self._running:
                    return
                samples = list(self._running.values())
            time.sleep(self.step_s)
            for s in samples:
                if s.abort is not None or time.monotonic() >= s.ready_at:
                    self._step(s)

    def _step(self, s: _Sample) -> None:
        """One token (or the end) of one sample, pushed to its handle as a chunk."""
        p, r = s.request.params, s.request
        finish, new = s.abort, ()
        if finish is None and p.max_new_tokens == 0:     # prefill only
            finish = FinishReason.length()
        elif finish is None:
            i = len(s.out)
            if i < len(s.script) or p.ignore_eos:
                new = (s.script[i] if i < len(s.script) else self._filler,)
                s.out += new
                if len(s.out) >= p.max_new_tokens:
                    finish = FinishReason.length()
            else:
                finish = FinishReason.stop()
        start = r.logprob_start_len
        prompt_lps = ()
        if r.return_logprob and start is not None and start >= 0 and not s.started:
            prompt_lps = tuple((None if i == 0 else self._logprob(s.ids[:i], s.ids[i]), s.ids[i],
                                self.tokenizer.decode([s.ids[i]])) for i in range(start, len(s.ids)))
        lps = tuple(self._token_lp(t) for t in new) if r.return_logprob else ()
        tops = tuple([self._token_lp(t)] * r.top_logprobs_num for t in new) if r.return_logprob else ()
        if prompt_lps:
            s.call["prompt_logprobs"] = prompt_lps
        s.started = True
        text = self.tokenizer.decode(list(new))
        chunk = StreamChunk(s.rid, text, new, lps, tops, prompt_lps, ((),) * len(prompt_lps),
                            prompt_tokens=len(s.ids), completion_tokens=len(s.out), cached_tokens=s.cached,
                            finish_reason=finish)
        output = None
        if finish is not None:
            s.call["end"] = time.monotonic()
            with self._wake:
                del self._running[s.rid]
            output = GenerateOutput(
                s.rid, self.tokenizer.decode(s.out), tuple(s.out), finish, len(s.ids), cached_tokens=s.cached,
                input_token_logprobs=s.call.get("prompt_logprobs", ()) if r.return_logprob else None,
                output_token_logprobs=tuple(self._token_lp(t) for t in s.out) if r.return_logprob else None,
                output_top_logprobs=tuple([self._token_lp(t)] * r.top_logprobs_num for t in s.out)
                if r.return_logprob else None)
        s.handle.push(chunk, output)
