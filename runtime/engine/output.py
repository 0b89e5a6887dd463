"""StreamChunks from a Req: what a step added since the request's last chunk. Runs on the engine's thread."""
from __future__ import annotations

import codecs
import time

from sglite.protocol import FinishKind, StreamChunk

from .request import Req


def take_chunk(req: Req, tokenizer) -> StreamChunk | None:
    """The chunk for what req gained since its last one, or None while there is nothing to show yet (e.g. half
    a UTF-8 character, or text that may become a stop string); the ids and logprobs wait for the next chunk.
    Advances req.sent."""
    text = req.stop_checker.stream_delta(final=req.finished)
    if not text and not req.finished:
        return None
    sent, lp = req.sent, req.lp
    ids = tuple(req.output_ids[sent.ids:])
    new_lp = new_top = inp = inp_top = ()
    if lp.wanted:
        new_lp = _with_text(tokenizer, lp.output_tokens[sent.logprobs:])
        new_top = _top_with_text(tokenizer, lp.output_top[sent.logprobs:])
        if not sent.input_logprobs:
            inp = _with_text(tokenizer, lp.input_tokens)
            inp_top = _top_with_text(tokenizer, lp.input_top)
        sent.logprobs, sent.input_logprobs = len(lp.output_tokens), True
    clp = None
    if req.constrained_lp is not None:
        if sent.text_decoder is None:
            sent.text_decoder = codecs.getincrementaldecoder("utf-8")("replace")
        dec = sent.text_decoder
        clp = tuple((v, tok, dec.decode(tokenizer.token_bytes(tok))) for v, tok in req.constrained_lp[sent.constrained_lp:])
        sent.constrained_lp = len(req.constrained_lp)
    sent.ids = len(req.output_ids)
    ttft = e2e = None
    if req.finished:   # timed on the engine's side: a caller may read its chunks much later
        e2e = (req.finished_time or time.perf_counter()) - req.created
        ttft = req.first_token_time - req.created if req.first_token_time is not None else None
    return StreamChunk(req.rid, text, ids, new_lp, new_top, inp, inp_top, clp, prompt_tokens=req.prompt_len,
                       completion_tokens=len(req.output_ids), cached_tokens=req.cache_hit_tokens,
                       forced_tokens=req.forced_tokens, decode_passes=req.decode_passes,
                       spec_accepted_tokens=req.spec.accepted_total,
                       capped_values=req.matcher.capped_values if req.matcher is not None else 0,
                       closed_at_budget=req.matcher is not None and req.matcher.closed_at_budget
                       and req.finish_reason is not None and req.finish_reason.kind is FinishKind.STOP,
                       finish_reason=req.finish_reason,
                       ttft=ttft, e2e_latency=e2e)


def _with_text(tokenizer, pairs: list[tuple[float | None, int]]) -> tuple:
    return tuple((lp, tok, tokenizer.decode([tok])) for lp, tok in pairs)


def _top_with_text(tokenizer, rows: list[list[tuple[float, int]]]) -> tuple:
    return tuple([(lp, tok, tokenizer.decode([tok])) for lp, tok in row] for row in rows)
