"""N-gram drafting for speculative decoding, with no draft model.

An extraction copies much of its output from its input. Before a step, each decoding request proposes up to K
draft tokens: the tokens that followed the most recent earlier occurrence of its last n tokens (n = 4 down to
2), looked up in its own prompt and output, then in the outputs of recently finished requests (the same job's
other documents). Each draft token is checked against a copy of the request's grammar matcher; the first token
the grammar forbids cuts the draft. The next forward pass computes the pending tokens plus the draft in one
extend, and the StepProcessor accepts draft tokens while each equals the token sampled at the position before it
(the ordinary sampler, one draw per emitted token: greedy and seeded outputs are identical with drafting on or
off, and sampling keeps its distribution; for a one-token draft this is the standard acceptance rule).

Per request, the draft length adapts to what was accepted, and drafting pauses where it keeps failing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .request import Req

MAX_N = 4                 # longest n-gram matched
MIN_N = 2                 # shortest (1-grams draft noise)
PAUSE_STEPS = 8           # steps without drafting after drafts keep failing
FAIL_LIMIT = 3            # consecutive drafts with nothing accepted before a pause
SHARED_MAX_ENTRIES = 200_000


@dataclass
class DraftState:
    """A request's n-gram index over its own tokens: index[n][last n tokens] = position of the token that
    followed their most recent earlier occurrence. Covers all_ids()[:indexed]."""
    index: dict[int, dict[tuple[int, ...], int]] = field(default_factory=lambda: {n: {} for n in range(MIN_N, MAX_N + 1)})
    indexed: int = 0
    k: int = 0                # current draft length limit
    failures: int = 0         # consecutive drafts with nothing accepted
    paused: int = 0           # steps left without drafting


class NgramDrafter:
    def __init__(self, max_draft: int):
        self.max_draft = max_draft
        # continuations seen in finished requests' outputs: last n tokens -> the tokens that followed
        self.shared: dict[int, dict[tuple[int, ...], tuple[int, ...]]] = {n: {} for n in range(MIN_N, MAX_N + 1)}
        self.proposed = 0
        self.accepted = 0

    # --- before a step ---------------------------------------------------------------------------------------
    def propose(self, req: Req) -> list[int]:
        """Draft tokens to verify after req's pending tokens ([] for none)."""
        st = req.draft_state
        if st is None:
            st = req.draft_state = DraftState(k=self.max_draft)
        if st.paused:
            st.paused -= 1
            return []
        room = req.remaining_new_tokens - 1   # the pass also samples one token after the draft
        if room <= 0 or req.finished:
            return []
        ids = req.all_ids()
        self._index(st, ids)
        draft = self._lookup(st, ids, min(st.k, room))
        if draft and req.matcher is not None:
            draft = _grammar_prefix(req, draft)
        return draft

    def _index(self, st: DraftState, ids: list[int]) -> None:
        for p in range(max(st.indexed, MIN_N), len(ids)):
            for n in range(MIN_N, min(MAX_N, p) + 1):
                st.index[n][tuple(ids[p - n:p])] = p
        st.indexed = len(ids)

    def _lookup(self, st: DraftState, ids: list[int], k: int) -> list[int]:
        L = len(ids)
        for n in range(min(MAX_N, L), MIN_N - 1, -1):
            key = tuple(ids[L - n:])
            at = st.index[n].get(key)
            if at is not None and at < L:
                return ids[at:at + k]
            cont = self.shared[n].get(key)
            if cont is not None:
                return list(cont[:k])
        return []

    # --- after a step ----------------------------------------------------------------------------------------
    def feedback(self, req: Req, proposed: int, accepted: int) -> None:
        """Adapts req's draft length: grows after a fully accepted draft, shrinks to what was accepted; pauses
        drafting after FAIL_LIMIT drafts in a row with nothing accepted."""
        st = req.draft_state
        self.proposed += proposed
        self.accepted += accepted
        if accepted == proposed:
            st.k, st.failures = min(self.max_draft, st.k + 2), 0
        elif accepted == 0:
            st.k, st.failures = max(1, st.k // 2), st.failures + 1
            if st.failures >= FAIL_LIMIT:
                st.paused, st.failures, st.k = PAUSE_STEPS, 0, self.max_draft
        else:
            st.k, st.failures = max(1, accepted + 1), 0

    def on_finished(self, req: Req) -> None:
        """Remembers req's output for other requests' drafts."""
        out = req.output_ids
        if sum(len(t) for t in self.shared.values()) > SHARED_MAX_ENTRIES:
            for table in self.shared.values():
                table.clear()
        for p in range(MIN_N, len(out)):
            for n in range(MIN_N, min(MAX_N, p) + 1):
                self.shared[n][tuple(out[p - n:p])] = tuple(out[p:p + self.max_draft])


def _grammar_prefix(req: Req, draft: list[int]) -> list[int]:
    """The longest prefix of draft that req's grammar allows from its current state."""
    m = req.matcher.copy()
    for i, tok in enumerate(draft):
        if m.is_terminated() or not m.advance(tok):
            return draft[:i]
    return draft
