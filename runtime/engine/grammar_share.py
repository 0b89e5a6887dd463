"""GrammarShare: the Scheduler's fair share of grammar work.

A request whose grammar work (its mask, its jump-forward: `Req.grammar_s`, timed where they run) is expected to
take more than SLOW_GRAMMAR_S a step is slow. Expected: what its latest step took, or half the previous
expectation if that is more (a costly step, a cold mask of a new parser state, tends to recur).

- A step takes slow requests (fewest passes first) only up to SLOW_STEP_GRAMMAR_S of their expected grammar time,
  at least one, so a request arriving meanwhile waits for no long step but one request's work.
- A step with slow requests in it, taken while others waited (running requests that are not slow, or queued
  ones), owes their grammar time (at most the step's): the following steps leave the slow requests out until as
  much step time again has gone to the others.
- A step that admits queued requests leaves them out as well (never two steps in a row for that alone), so a new
  request's first token waits for none of them.

So another request's grammar, however expensive, takes at most half of the engine's time from a request that has
none (plus a step), and the slow requests still progress. Which steps a request is in does not change its tokens
(batch invariance)."""
from __future__ import annotations

from typing import Sequence

from .request import Req

SLOW_GRAMMAR_S = 0.005       # expected grammar seconds a step past which a request is slow
SLOW_STEP_GRAMMAR_S = 0.25   # one step's share of slow grammar work (seconds, as expected per request)


class GrammarShare:
    def __init__(self) -> None:
        self.debt = 0.0                       # seconds of steps with slow requests owed to the others
        self.sitting_out: set[Req] = set()    # the slow requests the current step leaves out
        self._cost: dict[Req, float] = {}     # running request -> expected grammar seconds a step
        self._admitted_without_slow = False   # the last step left them out to admit queued requests

    def slow(self, req: Req) -> bool:
        return self._cost.get(req, 0.0) > SLOW_GRAMMAR_S

    def start_step(self, running: Sequence[Req], others_queued: bool, can_admit: bool) -> set[Req]:
        """Sets and returns `sitting_out` for a step about to be scheduled. `others_queued`: requests are queued
        or a prompt is half prefilled; `can_admit`: a queued request may be admitted (a free running slot)."""
        admit = can_admit and not self._admitted_without_slow
        self._admitted_without_slow = False
        slow = [r for r in running if self.slow(r)]
        if not slow:
            self.sitting_out = set()
        elif self.debt > 0 and (len(slow) < len(running) or others_queued):
            self.sitting_out = set(slow)
        elif admit:
            self._admitted_without_slow = True
            self.sitting_out = set(slow)
        else:
            slow.sort(key=lambda r: r.decode_passes)   # stable: admission order among equals
            taken, spent = 1, self._cost[slow[0]]
            while taken < len(slow) and spent + self._cost[slow[taken]] <= SLOW_STEP_GRAMMAR_S:
                spent += self._cost[slow[taken]]
                taken += 1
            self.sitting_out = set(slow[taken:])
        return self.sitting_out

    def end_step(self, batch_reqs: Sequence[Req], running: Sequence[Req], others_queued: bool, took: float) -> None:
        """After the step's requests were processed (their grammar_s holds this step's work, finished ones are
        out of `running`; `took`: the step's seconds): updates their expected costs and the debt. With nobody
        waiting beside slow requests, nothing is owed."""
        for r in batch_reqs:
            if r.finished:
                self._cost.pop(r, None)
            else:
                self._cost[r] = max(r.grammar_s, 0.5 * self._cost.get(r, 0.0))
        if not others_queued and all(self.slow(r) for r in running):
            self.debt = 0.0
            return
        slow_s = sum(r.grammar_s for r in batch_reqs if self.slow(r))
        if slow_s:
            self.debt += min(took, slow_s)
        elif self.sitting_out:
            self.debt = max(0.0, self.debt - took)

    def forget(self, req: Req) -> None:
        """Drops an aborted request."""
        self._cost.pop(req, None)
