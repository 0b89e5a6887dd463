"""Req: one generation request, the object that flows through admission, forward passes, sampling and output.

KV bookkeeping (invariants while RUNNING):
    req_to_token[row, :kv_len] holds the slots of tokens all_ids[:kv_len], whose K/V are computed;
    the first cached_len of them belong to the prefix cache (locked through last_node), the rest to this request.
    seq_len - kv_len >= 1 tokens are pending: the next forward pass computes them (prefill chunk, decode token,
    or jump-forward tokens), and its last row's logits sample the next token.
"""
from __future__ import annotations

import time
from enum import Enum, auto
from typing import Any

import torch

from sglite.protocol import FinishReason, SamplingParams


class ReqStatus(Enum):
    """Written only by the Scheduler (the one writer of status and finish_reason)."""
    WAITING = auto()    # queued; holds no slots or table row
    RUNNING = auto()    # holds a table row and KV slots; prefilling (maybe in chunks) or decoding
    FINISHED = auto()   # released everything; finish_reason is set


class Req:
    def __init__(self, rid: str, input_ids: list[int], params: SamplingParams, *, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                 generator: torch.Generator | None = None, matcher: Any = None, stop_checker: Any = None):
        self.rid = rid
        self.origin_input_ids = input_ids
        self.output_ids: list[int] = []
        self.forced_tokens = 0          # output tokens appended by jump-forward (not sampled)
        self.params = params
        self.status = ReqStatus.WAITING
        self.finish_reason: FinishReason | None = None
        # KV state (see module docstring)
        self.row: int | None = None
        self.kv_len = 0
        self.cached_len = 0
        self.last_node = None
        self.cached_tokens = 0          # prompt tokens served from the cache at first admission
        self.admitted_once = False
        # logprobs
        self.return_logprob = return_logprob
        start = len(input_ids) if logprob_start_len is None or logprob_start_len < 0 else logprob_start_len
        self.logprob_start_len = min(start, len(input_ids))
        self.top_logprobs_num = top_logprobs_num
        self.input_logprobs_done = not return_logprob or self.logprob_start_len >= len(input_ids)
        self.input_token_logprobs: list[tuple[float | None, int]] = []
        self.input_top_logprobs: list[list[tuple[float, int]]] = []
        self.output_token_logprobs: list[tuple[float | None, int]] = []
        self.output_top_logprobs: list[list[tuple[float, int]]] = []
        # sampling state
        self.generator = generator
        self.matcher = matcher                  # grammar matcher (runtime.constrained) or None
        self.stop_checker = stop_checker        # StopChecker: output text and stop strings
        self.token_counts: torch.Tensor | None = None   # [V] output-token counts, only with penalties
        self.prompt_mask: torch.Tensor | None = None    # [V] bool, prompt tokens, only with repetition_penalty
        # timing
        self.created = time.perf_counter()
        self.first_token_time: float | None = None
        self.finished_time: float | None = None
        # speculative decoding (speculative.py): this step's draft, appended after the pending tokens; how many of
        # it were accepted; the drafter's per-request state; totals
        self.draft: list[int] = []
        self.draft_accepted = 0
        self.draft_state: Any = None
        self.decode_passes = 0          # forward passes in which this request sampled or verified tokens
        self.spec_accepted_tokens = 0
        # what EngineCore has already handed out in StreamChunks (see core.py)
        self.sent_ids = 0
        self.sent_logprobs = 0
        self.sent_input_logprobs = False

    # --- derived lengths ------------------------------------------------------------------------------------
    @property
    def prompt_len(self) -> int:
        return len(self.origin_input_ids)

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        """Tokens whose K/V the next forward pass must compute (not counting a draft)."""
        return self.seq_len - self.kv_len

    @property
    def in_prompt(self) -> bool:
        """True until the whole prompt's K/V is computed (a chunked prefill is mid-way)."""
        return self.kv_len < self.prompt_len

    @property
    def remaining_new_tokens(self) -> int:
        return self.params.max_new_tokens - len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def all_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    def tokens(self, start: int, end: int) -> list[int]:
        """all_ids()[start:end] without building the whole list."""
        p = self.prompt_len
        if end <= p:
            return self.origin_input_ids[start:end]
        if start >= p:
            return self.output_ids[start - p:end - p]
        return self.origin_input_ids[start:] + self.output_ids[:end - p]

    def max_cacheable_prefix(self) -> int:
        """Longest prefix the cache may serve: one token must stay pending (its logits sample the next
        token), and prompt logprobs need the logits of every position from logprob_start_len - 1 on."""
        limit = self.seq_len - 1
        if not self.input_logprobs_done:
            limit = min(limit, max(self.logprob_start_len - 1, 0))
        return limit

    def __repr__(self) -> str:
        return (f"Req({self.rid!r}, {self.status.name}, prompt={self.prompt_len}, out={len(self.output_ids)}, "
                f"kv={self.kv_len}, cached={self.cached_len})")
