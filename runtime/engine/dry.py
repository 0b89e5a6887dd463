"""DRY ("don't repeat yourself") sampling, as llama.cpp defines it, over a request's output tokens.

After output h[0..n), a token t that would make the output's last k tokens plus t repeat a sequence that occurred
earlier (h[i-k+1..i] == h[n-k..n), h[i+1] == t) with k >= allowed_length loses
multiplier * base^(k - allowed_length) from its logit (k the longest such match; the penalty capped at MAX_PENALTY). No match spans a breaker token (one whose text holds a sequence-breaker
string), so in JSON the default breakers (newline, ':', '"', '*') confine DRY to the inside of one value: it stops
`v2/v2/v2/...` or `.1.1.1...`, while repeated keys and structure are left to the grammar. llama.cpp also matches a
breaker string spread over several tokens; here a breaker must sit inside one token.

`DryState` keeps, per request, the length of the match ending at each earlier position (updated in O(n) numpy per
new token), so a step costs one vector pass per request with DRY on; requests with DRY off have no state."""
from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

FLOAT_MAX_LOG = 88.7228391   # log of float32's largest value: base^exponent stays finite below it
MAX_PENALTY = 1e9            # a ban that keeps the logit finite (a row of -inf would sample nothing)


class DryState:
    """One request's match lengths. `update(output_ids)` reads the tokens appended since the last call."""

    def __init__(self, breakers: np.ndarray):
        self.breakers = breakers                # bool [vocab]: breaker tokens
        self.hist = np.zeros(64, np.int64)      # output tokens seen, [n]
        self.run = np.zeros(64, np.int32)       # run[i]: longest k with hist[i-k+1..i] == hist[n-k..n), i < n-1
        self.n = 0

    def update(self, output_ids: Sequence[int]) -> None:
        if len(output_ids) < self.n:           # the output was rewound: start over
            self.n = 0
        for x in output_ids[self.n:]:
            n = self.n
            if n == len(self.hist):
                self.hist = np.concatenate([self.hist, np.zeros(n, np.int64)])
                self.run = np.concatenate([self.run, np.zeros(n, np.int32)])
            run = self.run
            if self.breakers[x] or n == 0:
                run[:n] = 0
            else:
                # the match ending at i grows from the one ending at i - 1 where hist[i] == x
                prev = np.empty(n, np.int32)
                prev[0] = 0
                prev[1:] = run[:n - 1]
                run[:n] = np.where(self.hist[:n] == x, prev + 1, 0)
            self.hist[n] = x
            run[n] = 0
            self.n = n + 1

    def repeats(self, allowed_length: int) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, longest match length each would extend), for matches of at least allowed_length."""
        n = self.n
        if n < 2:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        at = np.flatnonzero(self.run[:n - 1] >= allowed_length)
        if at.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        tokens, lengths = self.hist[at + 1], self.run[at]
        order = np.lexsort((-lengths, tokens))          # per token, its longest match first
        tokens, lengths = tokens[order], lengths[order]
        first = np.r_[True, tokens[1:] != tokens[:-1]]
        return tokens[first], lengths[first]


def dry_penalties(lengths: np.ndarray, multiplier: float, base: float, allowed_length: int) -> np.ndarray:
    """float32 penalties for matches of `lengths` tokens (each >= allowed_length), at most MAX_PENALTY."""
    cap = int(FLOAT_MAX_LOG / math.log(base))
    pen = multiplier * np.power(base, np.minimum(lengths - allowed_length, cap), dtype=np.float64)
    return np.minimum(pen, MAX_PENALTY).astype(np.float32)


def breaker_tokens(token_bytes: Sequence[bytes], breakers: Sequence[str]) -> np.ndarray:
    """bool [vocab]: tokens whose bytes hold one of the breaker strings. One search of each breaker through the
    whole vocabulary joined by NUL bytes (a match cannot span two tokens: breakers with a NUL in them are
    searched token by token)."""
    pats = [b.encode("utf-8") for b in breakers]
    out = np.zeros(len(token_bytes), bool)
    lens = np.fromiter((len(t) for t in token_bytes), np.int64, len(token_bytes))
    starts = np.concatenate([[0], np.cumsum(lens + 1)[:-1]])     # token i's bytes begin at starts[i]
    data = b"\0".join(token_bytes)
    for p in pats:
        if not p or b"\0" in p:
            out |= np.array([p in t for t in token_bytes], bool)
            continue
        at = np.array([m.start() for m in re.finditer(re.escape(p), data)], np.int64)
        out[np.searchsorted(starts, at, side="right") - 1] = True
    return out
