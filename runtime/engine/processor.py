"""StepProcessor: applies one forward pass's logits to its requests: prompt logprobs, sampling, appending tokens,
finish checks (EOS, stop tokens, stop strings, grammar end, length), grammar advance and jump-forward, and draft
acceptance. It decides that a request ends (`Req.finish`); the Scheduler's finish_step then advances each request's
K/V past what the pass computed and releases the finished."""
from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Callable

import torch

from sglite.protocol import ABORT_GRAMMAR, FinishReason

from .grammar_masks import GrammarMasks
from .model_runner import ForwardOutput
from .request import Req, ScheduledBatch
from .sampler import Sampler


class StepProcessor:
    def __init__(self, sampler: Sampler, eos_token_id: int | None,
                 jump_forward: Callable[[Req], list[int]] | None = None):
        self.sampler = sampler
        self.eos_token_id = eos_token_id
        self.jump_forward = jump_forward   # forced tokens after a grammar step ([] if none), or None (off)

    def process(self, batch: ScheduledBatch, out: ForwardOutput, masks: "Future[GrammarMasks] | None" = None) -> None:
        """Mutates batch.reqs: logprobs, output_ids, finish_reason, matcher state, accepted draft tokens (not
        kv.len: the Scheduler's finish_step advances it). `masks`: grammar masks being built during the forward
        pass (see grammar_masks)."""
        masks = masks.result() if masks is not None else None
        self._prompt_logprobs(batch, out)
        for req, n in zip(batch.reqs, batch.extend_lens):
            if not req.lp.input_done and req.kv.len + n - len(req.spec.draft) >= req.prompt_len - 1:
                req.lp.input_done = True
        idx = [i for i, r in enumerate(batch.reqs) if out.sample_rows[i] is not None]
        prefill_only = [i for i in idx if batch.reqs[i].params.max_new_tokens == 0]
        for i in prefill_only:
            batch.reqs[i].finish(FinishReason.length())
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
            self._append(req, s.token_ids[j], lp, top, clp=s.constrained_logprobs[j] if s.constrained_logprobs else None)
            first = out.sample_rows[idx[j]]
            while not self._jump_forward(req) and req.spec.accepted < len(req.spec.draft):
                if not self._accept_draft(req, out.logits, first):
                    break

    def _jump_forward(self, req: Req) -> bool:
        """Appends the tokens req's grammar forces next, if any (the matcher is already past them). True if any."""
        if req.finished or req.matcher is None or self.jump_forward is None or req.lp.wanted:
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
        i = req.spec.accepted
        if req.finished or req.output_ids[-1] != req.spec.draft[i]:
            return False
        req.spec.accepted += 1              # its K/V was computed in this pass: finish_step counts it in kv.len
        req.spec.accepted_total += 1
        row = first_row + 1 + i
        s = self.sampler.sample(logits[[row]], [req])   # a copy: the sampler writes masks into it
        self._append(req, s.token_ids[0], s.logprobs[0] if s.logprobs else None,
                     s.top_logprobs[0] if s.top_logprobs else [],
                     clp=s.constrained_logprobs[0] if s.constrained_logprobs else None)
        return True

    def _append(self, req: Req, tok: int, logprob: float | None, top: list, forced: bool = False,
                last_forced: bool = False, clp: float | None = None) -> None:
        """Adds one output token and sets finish_reason if it ends the request. Jump-forward tokens (forced)
        come with the matcher already advanced past all of them: the grammar's end is checked at the last.
        `clp`: its log-probability under the masked distribution (a forced token's is 0.0, it had no other)."""
        p = req.params
        req.output_ids.append(tok)
        req.forced_tokens += forced
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()
        if req.token_counts is not None:
            req.token_counts[tok] += 1
        if req.lp.wanted:
            req.lp.output_tokens.append((logprob, tok))
            req.lp.output_top.append(top)
        if req.constrained_lp is not None:
            req.constrained_lp.append((0.0 if forced else clp, tok))
        is_stop_token = tok in p.stop_token_ids or (tok == self.eos_token_id and not p.ignore_eos)
        if is_stop_token and len(req.output_ids) > p.min_new_tokens:
            if p.no_stop_trim:
                req.stop_checker.push([tok])
            req.finish(FinishReason.stop(tok))
            return
        if req.matcher is not None:
            if forced:
                pass  # jump_forward already advanced the matcher
            elif not req.matcher.accept_token(tok):
                req.finish(FinishReason.abort(ABORT_GRAMMAR, f"grammar rejected sampled token {tok}"))
                return
        matched = req.stop_checker.push([tok])
        if matched is not None:
            req.finish(FinishReason.stop(matched))
        elif req.matcher is not None and (not forced or last_forced) and req.matcher.is_terminated():
            req.finish(FinishReason.stop())
        elif req.remaining_new_tokens <= 0:
            req.finish(FinishReason.length())

    def _prompt_logprobs(self, batch: ScheduledBatch, out: ForwardOutput) -> None:
        spans = [(i, *out.prompt_rows[i]) for i, r in enumerate(batch.reqs) if not r.lp.input_done]
        for i, _, _ in spans:
            lp = batch.reqs[i].lp
            if lp.start_len == 0 and not lp.input_tokens:
                lp.input_tokens.append((None, batch.reqs[i].origin_input_ids[0]))
                lp.input_top.append([])
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
        k = max(batch.reqs[i].lp.top_n for i, _, _ in spans)
        top_v = top_i = None
        if k:
            top_v, top_i = (t.tolist() for t in lp.topk(k, dim=-1))
        at = 0
        for i, _, count in spans:
            state = batch.reqs[i].lp
            n = state.top_n
            for j in range(at, at + count):
                state.input_tokens.append((chosen[j], targets[j]))
                state.input_top.append(list(zip(top_v[j][:n], top_i[j][:n])) if n else [])
            at += count
