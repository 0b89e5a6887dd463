"""A stand-in Engine with the contract's shape (docs/DESIGN.md, "Engine"), for server tests that must not depend
on the real scheduler: a thread emits one token per step for each running request, and slot use is tracked so
tests can check that aborts free everything."""
from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

KNOWN_KEYS = {"max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
              "presence_penalty", "repetition_penalty", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
              "no_stop_trim", "n", "seed", "regex", "json_schema", "ebnf"}
WORDS = " the quick brown fox jumps over a lazy dog and runs away".split(" ")


class FakeEngine:
    def __init__(self, tokenizer: Any, max_context: int = 4096, step_s: float = 0.001, total_slots: int = 100_000):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.step_s = step_s
        self.total_slots = total_slots
        self.used_slots = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._running: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        self._word_ids = [tokenizer.encode(" " + w)[0] for w in WORDS if w]

    # --- contract ---
    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False,
                             logprob_start_len=None, top_logprobs_num=0, stream=False):
        params = dict(sampling_params or {})
        unknown = set(params) - KNOWN_KEYS
        if unknown:
            raise ValueError(f"unknown sampling parameter {sorted(unknown)[0]!r}")
        if params.get("temperature", 1.0) < 0:
            raise ValueError(f"temperature must be >= 0, got {params['temperature']}")
        if "regex" in params and params["regex"].count("(") != params["regex"].count(")"):
            raise ValueError(f"regex {params['regex']!r} does not compile: unbalanced parenthesis")
        ids = input_ids if input_ids is not None else self.tokenizer.encode(prompt)
        if len(ids) >= self.max_context:
            raise ValueError(f"prompt of {len(ids)} tokens exceeds max_context {self.max_context}")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        rid = f"fake-{next(self._ids)}"
        req = {"rid": rid, "ids": ids, "max": params.get("max_new_tokens", 128), "out": [], "loop": loop,
               "queue": queue, "abort": False, "lp": return_logprob, "top": top_logprobs_num}
        with self._lock:
            self.used_slots += len(ids)
            self._running[rid] = req
        if stream:
            return self._stream(queue)
        last = None
        async for chunk in self._stream(queue):
            if last is None:
                last = chunk
            else:
                last["text"] += chunk["text"]
                for key in ("output_token_logprobs", "output_top_logprobs"):
                    if key in chunk["meta_info"]:
                        chunk["meta_info"][key] = last["meta_info"][key] + chunk["meta_info"][key]
                last["meta_info"] = chunk["meta_info"]
        last["output_ids"] = list(req["out"])
        return last

    async def _stream(self, queue: asyncio.Queue):
        while True:
            chunk = await queue.get()
            yield chunk
            if chunk["meta_info"]["finish_reason"]:
                return

    def abort(self, rid: str) -> None:
        with self._lock:
            if rid in self._running:
                self._running[rid]["abort"] = True

    def flush_cache(self) -> bool:
        return True

    def get_stats(self) -> dict:
        with self._lock:
            return {"num_running": len(self._running), "num_waiting": 0, "pool_tokens": self.total_slots,
                    "pool_free_tokens": self.total_slots - self.used_slots, "cache_hit_rate": 0.0}

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    # --- the "scheduler" ---
    def _loop(self) -> None:
        while not self._stop.is_set():
            time.sleep(self.step_s)
            with self._lock:
                reqs = list(self._running.values())
            for r in reqs:
                finish = None
                if r["abort"]:
                    finish = {"type": "abort", "matched": None}
                    new = []
                else:
                    new = [self._word_ids[len(r["out"]) % len(self._word_ids)]]
                    r["out"] += new
                    with self._lock:
                        self.used_slots += 1
                    if len(r["out"]) >= r["max"]:
                        finish = {"type": "length", "matched": None}
                meta = {"id": r["rid"], "prompt_tokens": len(r["ids"]), "completion_tokens": len(r["out"]),
                        "cached_tokens": 0, "finish_reason": finish, "e2e_latency": 0.0}
                if r["lp"]:
                    meta["output_token_logprobs"] = [(-0.5, t, None) for t in new]
                    meta["output_top_logprobs"] = [[(-0.5, t, None)] * r["top"] for t in new]
                chunk = {"text": self.tokenizer.decode(new), "output_ids": new, "meta_info": meta}
                if finish:
                    with self._lock:
                        self.used_slots -= len(r["ids"]) + len(r["out"])
                        del self._running[r["rid"]]
                r["loop"].call_soon_threadsafe(r["queue"].put_nowait, chunk)
