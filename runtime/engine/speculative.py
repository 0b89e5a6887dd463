"""N-gram drafting for speculative decoding, with no draft model, and drafts only where they pay.

An extraction copies much of its output from its input. Before a step, each decoding request looks up a
candidate draft of up to K tokens: the tokens that followed the most recent earlier occurrence of its last n
tokens (n = 4 down to 1), in its own prompt and output, then in the outputs of recently finished requests (the
same job's other documents). The next forward pass computes the pending tokens plus the draft in one extend,
and the StepProcessor accepts draft tokens while each equals the token sampled at the position before it (the
ordinary sampler, one draw per emitted token: greedy and seeded outputs are identical with drafting on or off,
and sampling keeps its distribution; for a one-token draft this is the standard acceptance rule).

A draft row is not free: on a CPU whose matmul kernel is bound by arithmetic it costs a large part of a whole
one-row pass (on AVX2 Zen 1 about 0.4), where on a memory-bound one it costs little. So the drafter plans:
- `PassCost` learns the step time by the pass's rows, from the engine's own decode steps.
- `Acceptance` estimates, for each candidate, the chance that a draft token is accepted once the ones before it
  were: per draft source (own text or other requests', and the n-gram's length), blended with the request's own
  recent record.
- `plan_drafts` takes candidates best next gain first, each the run of its next tokens that most raises
  expected tokens per second.
Then each kept draft is cut at the first token its grammar forbids. A source that the plan keeps declining is
retried with one token now and then, so its estimate can recover.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .request import Req

MAX_N = 4                 # longest n-gram matched
MIN_N = 1                 # shortest: a 1-gram's draft is often noise, but the plan weighs each n-gram length's
                          # record apart and declines one that does not pay (on the main job, AVX-512 Zen 4,
                          # 20 reports at batch 1: 2.30 -> 2.54 sampled tokens a pass, 1.31x -> 1.37x)
SHARED_MAX_ENTRIES = 200_000

SOURCE_DECAY = 0.97       # per verified draft of a source: older outcomes weigh less
REQUEST_DECAY = 0.7       # per verified draft of a request
REQUEST_WEIGHT = 3.0      # a source's estimate counts as this many of the request's own draft tokens
PRIOR_ROW_COST = 0.25     # before two row counts are seen: one more row costs this much of a one-row step
MIN_ROW_COST = 0.02       # a fitted slope is at least this much of a one-row pass (timing noise)
COST_DECAY = 0.9          # per observed step of a row count: its mean time follows recent steps
EXPLORE_EVERY = 64        # a source declined this many times in a row gets a one-token draft


@dataclass
class DraftState:
    """A request's n-gram index over its own tokens: index[n][last n tokens] = position of the token that
    followed their most recent earlier occurrence. Covers all_ids()[:indexed]. `source` is where this step's
    candidate came from; `accepted` / `tried` count the request's recent draft tokens (decayed)."""
    index: dict[int, dict[tuple[int, ...], int]] = field(default_factory=lambda: {n: {} for n in range(MIN_N, MAX_N + 1)})
    indexed: int = 0
    source: tuple[str, int] | None = None
    accepted: float = 0.0
    tried: float = 0.0


class PassCost:
    """Seconds of a decode step (no prefill rows) as a line in its rows R, t(R) = t1 + per_row (R - 1), fitted by
    weighted least squares through the mean time of each row count seen (recent steps weigh most); before two
    row counts are seen, per_row = PRIOR_ROW_COST t1. `fixed_row_cost` pins per_row / t1 instead (tests; a
    machine known in advance). A third term for a step up from one row to two (the first draft row measured
    about 0.6 of a step at batch 1, each further one about 0.35) was tried: fitted through jump-forward runs of
    up to 15 rows it swung to several whole steps and stopped drafts that paid, so the line stays."""

    def __init__(self, fixed_row_cost: float | None = None):
        self.fixed = fixed_row_cost
        self.mean: dict[int, tuple[float, float]] = {}   # rows -> (mean seconds, weight)

    def observe(self, rows: int, seconds: float) -> None:
        m, w = self.mean.get(rows, (seconds, 0.0))
        w = COST_DECAY * w + 1.0
        self.mean[rows] = (m + (seconds - m) / w, w)

    def model(self) -> tuple[float, float]:
        """(t1, per_row); t1 = 1 when nothing is measured; per_row >= MIN_ROW_COST * t1."""
        seen = list(self.mean.items())   # get_stats reads from another thread
        if self.fixed is not None or len(seen) < 2:
            share = PRIOR_ROW_COST if self.fixed is None else self.fixed
            r0, (t0, _) = seen[0] if seen else (1, (1.0, 0.0))
            t1 = t0 / (1.0 + share * (r0 - 1))      # through the one point seen, with the assumed slope
            return t1, t1 * share
        sw = sr = st = srr = srt = 0.0
        for r, (t, w) in seen:
            x = r - 1
            sw, sr, st, srr, srt = sw + w, sr + w * x, st + w * t, srr + w * x * x, srt + w * x * t
        per_row = (srt - sr * st / sw) / (srr - sr * sr / sw)
        t1 = max((st - per_row * sr) / sw, 1e-9)
        return t1, max(per_row, MIN_ROW_COST * t1)

    def curve(self):
        """t(R) as a function, for plan_drafts."""
        t1, per_row = self.model()
        return lambda r: t1 + per_row * (r - 1)

    def row_cost(self) -> float:
        """per_row / t1: what one more row adds, as a share of a one-row step."""
        t1, per_row = self.model()
        return per_row / t1


class Acceptance:
    """P(a draft token is accepted | the ones before it were), per source: ("own" | "shared", n-gram length).
    Decayed counts over verified drafts, with a prior of one accepted in two."""

    def __init__(self):
        self.counts: dict[tuple[str, int], tuple[float, float]] = {}   # source -> (accepted, tried), decayed
        self.declined: dict[tuple[str, int], int] = {}                 # source -> plans in a row that kept nothing

    def source_rate(self, source: tuple[str, int]) -> float:
        acc, tried = self.counts.get(source, (0.0, 0.0))
        return (acc + 1.0) / (tried + 2.0)

    def rate(self, st: DraftState) -> float:
        return (st.accepted + REQUEST_WEIGHT * self.source_rate(st.source)) / (st.tried + REQUEST_WEIGHT)

    def update(self, st: DraftState, proposed: int, accepted: int) -> None:
        """A verified draft: its first `accepted` tokens were accepted and, if it was not all accepted, the next
        was tried and rejected (the ones after that were never tried)."""
        tried = min(proposed, accepted + 1)
        acc, t = self.counts.get(st.source, (0.0, 0.0))
        self.counts[st.source] = (SOURCE_DECAY * acc + accepted, SOURCE_DECAY * t + tried)
        st.accepted = REQUEST_DECAY * st.accepted + accepted
        st.tried = REQUEST_DECAY * st.tried + tried


def plan_drafts(candidates: list[tuple[int, float]], rows: int, cost) -> list[int]:
    """How many tokens of each candidate draft to verify. candidates[i] = (length, p): request i's candidate and
    its per-token acceptance chance; `rows`: the pass's rows without drafts (one expected token per request);
    cost(R): a step's time at R rows. Token j of a draft (1-based) adds p^j expected tokens and one row.
    Candidates are taken best next gain first; each takes the run of its next tokens that most raises expected
    tokens per second, E / t(R), if any does (a run, not a token: where one more row costs more than the next
    ones, the first draft token can be a loss and the next few a gain)."""
    keep = [0] * len(candidates)
    expected = float(len(candidates))
    heap = [(-p, i, 1) for i, (n, p) in enumerate(candidates) if n > 0 and p > 0.0]
    heapq.heapify(heap)
    while heap:
        neg_gain, i, j = heapq.heappop(heap)
        n, p = candidates[i]
        best, best_rate, best_e = 0, expected / cost(rows), expected
        e, gain = expected, -neg_gain
        for m in range(1, n - j + 2):              # tokens j .. j + m - 1
            e += gain
            gain *= p
            rate = e / cost(rows + m)
            if rate > best_rate:
                best, best_rate, best_e = m, rate, e
        if best == 0:
            continue
        keep[i] = j + best - 1
        rows += best
        expected = best_e
        if keep[i] < n:
            heapq.heappush(heap, (neg_gain * p ** best, i, keep[i] + 1))
    return keep


class NgramDrafter:
    def __init__(self, max_draft: int, row_cost: float | None = None):
        self.max_draft = max_draft
        # continuations seen in finished requests' outputs: last n tokens -> the tokens that followed
        self.shared: dict[int, dict[tuple[int, ...], tuple[int, ...]]] = {n: {} for n in range(MIN_N, MAX_N + 1)}
        self.cost = PassCost(row_cost)
        self.acceptance = Acceptance()
        self.proposed = 0
        self.accepted = 0

    # --- before a step ---------------------------------------------------------------------------------------
    def propose_all(self, reqs: list[Req]) -> None:
        """Sets r.spec.draft for every running request: its candidate, cut to what the plan keeps, then to what its
        grammar allows."""
        cands = [self._candidate(r) for r in reqs]
        if not any(cands):
            return
        rates = [self.acceptance.rate(r.spec.drafter_state) if c else 0.0 for r, c in zip(reqs, cands)]
        keep = plan_drafts([(len(c), p) for c, p in zip(cands, rates)], sum(r.num_pending for r in reqs),
                           self.cost.curve())
        declined = self.acceptance.declined
        for r, c, k in zip(reqs, cands, keep):
            if not c:
                continue
            src = r.spec.drafter_state.source
            if k == 0:
                declined[src] = declined.get(src, 0) + 1
                if declined[src] < EXPLORE_EVERY:
                    continue
                k = 1                       # a retry, so that a source's estimate can recover
            declined[src] = 0
            r.spec.draft = _grammar_prefix(r, c[:k]) if r.matcher is not None else c[:k]

    def _candidate(self, req: Req) -> list[int]:
        st = req.spec.drafter_state
        if st is None:
            st = req.spec.drafter_state = DraftState()
        req.spec.draft = []
        room = min(self.max_draft, req.remaining_new_tokens - 1)   # the pass also samples one after the draft
        if room <= 0 or req.finished:
            return []
        ids = req.all_ids()
        self._index(st, ids)
        return self._lookup(st, ids, room)

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
                st.source = ("own", n)
                return ids[at:at + k]
            cont = self.shared[n].get(key)
            if cont is not None:
                st.source = ("shared", n)
                return list(cont[:k])
        return []

    # --- after a step ----------------------------------------------------------------------------------------
    def observe_step(self, rows: int, seconds: float) -> None:
        """A decode step (no prefill rows) of `rows` rows took `seconds`, end to end."""
        self.cost.observe(rows, seconds)

    def feedback(self, req: Req, proposed: int, accepted: int) -> None:
        self.proposed += proposed
        self.accepted += accepted
        self.acceptance.update(req.spec.drafter_state, proposed, accepted)

    def forget_outputs(self) -> None:
        """Drops the finished requests' outputs (the engine's cache was flushed); what was learned of costs and
        acceptance stays."""
        for table in self.shared.values():
            table.clear()

    def on_finished(self, req: Req) -> None:
        """Remembers req's output for other requests' drafts."""
        out = req.output_ids
        if sum(len(t) for t in self.shared.values()) > SHARED_MAX_ENTRIES:
            self.forget_outputs()
        for p in range(MIN_N, len(out)):
            for n in range(MIN_N, min(MAX_N, p) + 1):
                self.shared[n][tuple(out[p - n:p])] = tuple(out[p:p + self.max_draft])


def _grammar_prefix(req: Req, draft: list[int]) -> list[int]:
    """The longest prefix of draft that req's grammar allows from its current state."""
    m = req.matcher.copy()
    for i, tok in enumerate(draft):
        if m.is_terminated() or not m.accept_token(tok):
            return draft[:i]
    return draft
