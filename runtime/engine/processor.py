"""StepProcessor: applies one forward pass's logits to its requests: prompt logprobs, sampling, appending tokens,
finish checks (EOS, stop tokens, stop strings, grammar end, length), grammar advance and jump-forward. It decides
that a request ends; the Scheduler's `finish` records it (the one writer of finish_reason)."""
from __future__ import annotations

import time
from typing import Callable

import torch

from sglite.protocol import ABORT_GRAMMAR, FinishReason

from .grammar_masks import GrammarMasks
from .model_runner import ForwardOutput, ScheduledBatch
from .request import Req
from .sampler import Sampler


class StepProcessor:
    def __init__(self, sampler: Sampler, eos_token_id: int | None, finish: Callable[[Req, FinishReason], None],
                 jump_forward: Callable[[Req], list[int]] | None = None):
        self.sampler = sampler
        self.finish = finish               # Scheduler.finish
        self.eos_token_id = eos_token_id
        self.jump_forward = jump_forward   # forced tokens after a grammar step ([] if none), or None (off)

    def process(self, batch: ScheduledBatch, out: ForwardOutput, masks: GrammarMasks | None = None) -> None:
        """Mutates batch.reqs: kv_len, logprobs, output_ids, finish_reason, matcher state. `masks`: grammar
        masks built during the forward pass (see grammar_masks)."""
        self._prompt_logprobs(batch, out)
        for req, n in zip(batch.reqs, batch.extend_lens):
            req.kv_len += n - len(req.draft)   # accepted draft tokens are added as they are accepted
            if not req.input_logprobs_done and req.kv_len >= req.prompt_len - 1:
                req.input_logprobs_done = True
        idx = [i for i, r in enumerate(batch.reqs) if out.sample_rows[i] is not None]
        prefill_only = [i for i in idx if batch.reqs[i].params.max_new_tokens == 0]
        for i in prefill_only:
            self.finish(batch.reqs[i], FinishReason.length())
        idx = [i for i in idx if i not in prefill_only]
        if not idx:
            return
        reqs = [batch.reqs[i] for i in idx]
        logits = out.logits[[out.sample_rows[i] for i in idx]]
        s = self.sampler.sample(logits, reqs, masks)
        for j, req in enumerate(reqs):
            req.decode_passes += 1
            lp = s.logprobs[j] if s.logprobs else None
            top = s.top_logprobs[j] if s.top_logprobs else []
            self._append(req, s.token_ids[j], lp, top)
            first = out.sample_rows[idx[j]]
            while not self._jump_forward(req) and req.draft_accepted < len(req.draft):
                if not self._accept_draft(req, out.logits, first):
                    break

    def _jump_forward(self, req: Req) -> bool:
        """Appends the tokens req's grammar forces next, if any (the matcher is already past them). True if any."""
        if req.finished or req.matcher is None or self.jump_forward is None or req.return_logprob:
            return False
        forced = self.jump_forward(req)
        for k, tok in enumerate(forced[:req.remaining_new_tokens]):
            self._append(req, tok, None, [], forced=True, last_forced=k == len(forced) - 1)
            if req.finished:
                break
        return bool(forced)

    def _accept_draft(self, req: Req, logits: torch.Tensor, first_row: int) -> bool:
        """Accepts req's next draft token if it equals the token just sampled before it, then samples the token
        after it from its own row (the ordinary sampler with the request's live state: one draw per emitted token,
        so the output is the one decoding token by token gives). False when the draft ends here. The caller stops
        at jump-forward text, which decoding would append instead of sampling."""
        i = req.draft_accepted
        if req.finished or req.output_ids[-1] != req.draft[i]:
            return False
        req.draft_accepted += 1
        req.spec_accepted_tokens += 1
        req.kv_len += 1                     # the accepted token's K/V was computed in this pass
        row = first_row + 1 + i
        s = self.sampler.sample(logits[[row]], [req])   # a copy: the sampler writes masks into it
        self._append(req, s.token_ids[0], s.logprobs[0] if s.logprobs else None,
                     s.top_logprobs[0] if s.top_logprobs else [])
        return True

    def _append(self, req: Req, tok: int, logprob: float | None, top: list, forced: bool = False,
                last_forced: bool = False) -> None:
        """Adds one output token and sets finish_reason if it ends the request. Jump-forward tokens (forced)
        come with the matcher already advanced past all of them: the grammar's end is checked at the last."""
        p = req.params
        req.output_ids.append(tok)
        req.forced_tokens += forced
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()
        if req.token_counts is not None:
            req.token_counts[tok] += 1
        if req.return_logprob:
            req.output_token_logprobs.append((logprob, tok))
            req.output_top_logprobs.append(top)
        is_stop_token = tok in p.stop_token_ids or (tok == self.eos_token_id and not p.ignore_eos)
        if is_stop_token and len(req.output_ids) > p.min_new_tokens:
            if p.no_stop_trim:
                req.stop_checker.push([tok])
            self.finish(req, FinishReason.stop(tok))
            return
        if req.matcher is not None:
            if forced:
                pass  # jump_forward already advanced the matcher
            elif not req.matcher.advance(tok):
                self.finish(req, FinishReason.abort(ABORT_GRAMMAR, f"grammar rejected sampled token {tok}"))
                return
        matched = req.stop_checker.push([tok])
        if matched is not None:
            self.finish(req, FinishReason.stop(matched))
        elif req.matcher is not None and (not forced or last_forced) and req.matcher.is_terminated():
            self.finish(req, FinishReason.stop())
        elif req.remaining_new_tokens <= 0:
            self.finish(req, FinishReason.length())

    def _prompt_logprobs(self, batch: ScheduledBatch, out: ForwardOutput) -> None:
        spans = [(i, *out.prompt_rows[i]) for i, r in enumerate(batch.reqs) if not r.input_logprobs_done]
        for i, _, _ in spans:
            req = batch.reqs[i]
            if req.logprob_start_len == 0 and not req.input_token_logprobs:
                req.input_token_logprobs.append((None, req.origin_input_ids[0]))
                req.input_top_logprobs.append([])
        spans = [(i, first, count) for i, first, count in spans if count]
        if not spans:
            return
        rows = torch.cat([torch.arange(first, first + count) for _, first, count in spans])
        lp = torch.log_softmax(out.logits[rows.to(out.logits.device)], dim=-1)       # [N, V]
        targets = []
        for i, _, count in spans:
            pos = out.prompt_first_pos[i]
            targets.extend(batch.reqs[i].origin_input_ids[pos + 1:pos + 1 + count])
        chosen = lp.gather(1, torch.tensor(targets, device=lp.device)[:, None])[:, 0].tolist()
        k = max(batch.reqs[i].top_logprobs_num for i, _, _ in spans)
        top_v = top_i = None
        if k:
            top_v, top_i = (t.tolist() for t in lp.topk(k, dim=-1))
        at = 0
        for i, _, count in spans:
            req = batch.reqs[i]
            n = req.top_logprobs_num
            for j in range(at, at + count):
                req.input_token_logprobs.append((chosen[j], targets[j]))
                req.input_top_logprobs.append(list(zip(top_v[j][:n], top_i[j][:n])) if n else [])
            at += count
