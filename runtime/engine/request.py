"""Req: one generation request, the object that flows through admission, forward passes, sampling and output,
and ScheduledBatch: the requests one step computes.

A request's state comes in parts, each changed by one module:
    req.kv      KVState        the KVManager: its table row, how many tokens' K/V are computed, the cached part
    req.lp      LogprobState   the StepProcessor: the logprobs asked for and those computed so far
    req.spec    SpecState      the drafter proposes a draft, the StepProcessor accepts its tokens, the
                               Scheduler drops it short of memory and clears it after the step
    req.sent    SentCursor     output.take_chunk: how much has gone out in StreamChunks
and one lifecycle field, finish_reason (set once, by `finish`); `status` is derived from it and from the KV.

KV invariants while RUNNING:
    req_to_token[kv.row, :kv.len] holds the slots of tokens all_ids[:kv.len], whose K/V are computed;
    the first kv.shared_len of them are shared through the prefix cache (locked through kv.node), the rest
    belong to this request. seq_len - kv.len >= 1 tokens are pending: the next forward pass computes them
    (prefill chunk, decode token, or jump-forward tokens), and its last row's logits sample the next token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import torch

from sglite.protocol import FinishReason, SamplingParams


class ReqStatus(Enum):
    WAITING = auto()    # queued; holds no slots or table row
    RUNNING = auto()    # holds a table row and KV slots; prefilling (maybe in chunks) or decoding
    FINISHED = auto()   # finish_reason is set (its slots are released at the end of the step)


@dataclass
class KVState:
    """Where the request's K/V lives. Written only by the KVManager."""
    row: int | None = None      # its row of req_to_token while RUNNING
    len: int = 0                # tokens whose K/V is computed
    shared_len: int = 0         # of them, the leading ones shared through the prefix cache (locked at `node`)
    node: Any = None            # the radix-cache node that locks the shared part


@dataclass
class LogprobState:
    """The logprobs a request asked for, and those computed so far. Written by the StepProcessor."""
    wanted: bool = False
    start_len: int = 0          # prompt logprobs from this position on
    top_n: int = 0              # top logprobs per position
    input_done: bool = True     # every prompt logprob asked for is computed
    input_tokens: list[tuple[float | None, int]] = field(default_factory=list)
    input_top: list[list[tuple[float, int]]] = field(default_factory=list)
    output_tokens: list[tuple[float | None, int]] = field(default_factory=list)
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)


@dataclass
class SpecState:
    """Speculative decoding (speculative.py): this step's draft, appended after the pending tokens, and how many
    of it were accepted; the drafter's per-request state; the total accepted."""
    draft: list[int] = field(default_factory=list)
    accepted: int = 0
    drafter_state: Any = None
    accepted_total: int = 0


@dataclass
class SentCursor:
    """What output.take_chunk has already handed out in StreamChunks."""
    ids: int = 0
    logprobs: int = 0
    input_logprobs: bool = False
    constrained_lp: int = 0
    text_decoder: Any = None     # incremental UTF-8 decoder over the token bytes (constrained logprob texts)


class Req:
    def __init__(self, rid: str, input_ids: list[int], params: SamplingParams, *, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                 return_constrained_logprob: bool = False, generator: torch.Generator | None = None, matcher: Any = None, stop_checker: Any = None,
                 lora: Any = None):
        self.rid = rid
        self.lora = lora                # the LoraAdapter it runs under, held until it finishes (None: the base)
        self.origin_input_ids = input_ids
        self.output_ids: list[int] = []
        self.forced_tokens = 0          # output tokens appended by jump-forward (not sampled)
        self.params = params
        self.finish_reason: FinishReason | None = None
        self.cache_hit_tokens = 0       # prompt tokens the prefix cache served at the first admission
        self.admitted_once = False
        self.decode_passes = 0          # forward passes in which this request sampled or verified tokens
        self.kv = KVState()
        start = len(input_ids) if logprob_start_len is None or logprob_start_len < 0 else logprob_start_len
        start = min(start, len(input_ids))
        self.lp = LogprobState(return_logprob, start, top_logprobs_num,
                               input_done=not return_logprob or start >= len(input_ids))
        # (log-probability under the masked distribution, token) per output token, when asked for; 0.0: forced
        self.constrained_lp: list[tuple[float, int]] | None = [] if return_constrained_logprob else None
        self.spec = SpecState()
        self.sent = SentCursor()
        # sampling state
        self.generator = generator
        self.matcher = matcher                  # grammar matcher (runtime.constrained) or None
        self.grammar_s = 0.0                    # seconds its grammar work (masks, jump-forward) took in its latest
                                                # step: the Scheduler resets it, grammar_masks / grammar_backend add
        self.stop_checker = stop_checker        # StopChecker: output text and stop strings
        self.token_counts: torch.Tensor | None = None   # [V] output-token counts, only with penalties
        self.prompt_mask: torch.Tensor | None = None    # [V] bool, prompt tokens, only with repetition_penalty
        # timing
        self.created = time.perf_counter()
        self.first_token_time: float | None = None
        self.finished_time: float | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------
    def finish(self, reason: FinishReason) -> None:
        """Records that the request ends, and why (its slots are released at the end of the step)."""
        self.finish_reason = reason
        if self.stop_checker is not None:
            self.stop_checker.flush()
        self.finished_time = time.perf_counter()

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def status(self) -> ReqStatus:
        if self.finish_reason is not None:
            return ReqStatus.FINISHED
        return ReqStatus.RUNNING if self.kv.row is not None else ReqStatus.WAITING

    @property
    def lora_path(self) -> str | None:
        """The name of the adapter it runs under (None: the base)."""
        return None if self.lora is None else self.lora.name

    @property
    def lora_uid(self) -> int:
        """Its adapter's load number (0: the base): the prefix cache's namespace."""
        return 0 if self.lora is None else self.lora.uid

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
        return self.seq_len - self.kv.len

    @property
    def in_prompt(self) -> bool:
        """True until the whole prompt's K/V is computed (a chunked prefill is mid-way)."""
        return self.kv.len < self.prompt_len

    @property
    def remaining_new_tokens(self) -> int:
        return self.params.max_new_tokens - len(self.output_ids)

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
        token), and prompt logprobs need the logits of every position from lp.start_len - 1 on."""
        limit = self.seq_len - 1
        if not self.lp.input_done:
            limit = min(limit, max(self.lp.start_len - 1, 0))
        return limit

    def __repr__(self) -> str:
        return (f"Req({self.rid!r}, {self.status.name}, prompt={self.prompt_len}, out={len(self.output_ids)}, "
                f"kv={self.kv.len}, shared={self.kv.shared_len})")


@dataclass
class ScheduledBatch:
    """What one step computes: reqs[i] gets extend_lens[i] new tokens starting at its kv.len (its pending
    tokens, then its draft). The first num_prefill requests are being admitted or chunk-prefilled; the rest
    decode (one token, or a few jump-forward tokens, each, plus a draft)."""
    reqs: list[Req]
    extend_lens: list[int]
    out_cache_loc: torch.Tensor   # [sum(extend_lens)] int64 slots for the new tokens
    num_prefill: int

    @property
    def is_prefill(self) -> bool:
        return self.num_prefill > 0

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.extend_lens[:self.num_prefill])

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_lens)
