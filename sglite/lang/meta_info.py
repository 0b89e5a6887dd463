"""A gen's meta_info across stream chunks: which lists arrive as increments, and how two chunks' meta_info
combine. The backends hand each chunk's meta_info as the engine made it (totals so far; logprob lists as
increments); programs read them through `text_async_iter(..., return_meta_data=True)` and `get_meta_info`."""
from __future__ import annotations

from typing import Any

# meta_info lists that a streamed chunk carries as increments (input ones arrive in the first chunk only); the
# other fields are totals or constants, so the latest chunk's value stands
INCREMENTAL_META_KEYS = ("input_token_logprobs", "input_top_logprobs", "output_token_logprobs",
                         "output_top_logprobs", "output_token_ids_logprobs", "output_token_constrained_logprobs")


def merge_meta(earlier: dict[str, Any] | None, later: dict[str, Any]) -> dict[str, Any]:
    """One meta_info covering two consecutive stream chunks: `later`'s fields, with the incremental lists of
    both concatenated."""
    if not earlier:
        return dict(later)
    out = dict(later)
    for key in INCREMENTAL_META_KEYS:
        if key in earlier or key in later:
            out[key] = list(earlier.get(key) or []) + list(later.get(key) or [])
    return out


def count_logprobs(meta: dict[str, Any], before: int = 0) -> dict[str, Any]:
    """`meta` with SGLang's `output_token_logprobs_length`: the output logprobs so far (`before` of them in
    earlier chunks), when it carries any."""
    if "output_token_logprobs" not in meta:
        return meta
    return {**meta, "output_token_logprobs_length": before + len(meta["output_token_logprobs"])}
