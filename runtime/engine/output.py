"""Result dicts of Engine.generate (SGLang's shape), built from a Req on the loop thread."""
from __future__ import annotations

import time
from typing import Any

from .request import Req


def _with_text(tokenizer, pairs: list[tuple[float | None, int]]) -> list[tuple[float | None, int, str]]:
    return [(lp, tok, tokenizer.decode([tok])) for lp, tok in pairs]


def _top_with_text(tokenizer, rows: list[list[tuple[float, int]]]) -> list[list[tuple[float, int, str]]]:
    return [[(lp, tok, tokenizer.decode([tok])) for lp, tok in row] for row in rows]


def build_output(req: Req, tokenizer, *, text: str, logprobs_from: int = 0, input_logprobs: bool = True) -> dict:
    """The result dict. `text` is the full text (final) or the increment (stream); output logprobs start at
    output position `logprobs_from` (stream increments)."""
    end = req.finished_time or time.perf_counter()
    meta: dict[str, Any] = {
        "id": req.rid,
        "prompt_tokens": req.prompt_len,
        "completion_tokens": len(req.output_ids),
        "forced_tokens": req.forced_tokens,     # of completion_tokens, appended by jump-forward
        "cached_tokens": req.cached_tokens,
        "finish_reason": req.finish_reason.to_dict() if req.finish_reason else None,
        "e2e_latency": end - req.created,
    }
    if req.first_token_time is not None:
        meta["ttft"] = req.first_token_time - req.created
    if req.return_logprob:
        meta["input_token_logprobs"] = _with_text(tokenizer, req.input_token_logprobs) if input_logprobs else []
        meta["input_top_logprobs"] = _top_with_text(tokenizer, req.input_top_logprobs) if input_logprobs else []
        meta["output_token_logprobs"] = _with_text(tokenizer, req.output_token_logprobs[logprobs_from:])
        meta["output_top_logprobs"] = _top_with_text(tokenizer, req.output_top_logprobs[logprobs_from:])
    return {"text": text, "output_ids": list(req.output_ids), "meta_info": meta}
