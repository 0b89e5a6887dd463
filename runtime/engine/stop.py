"""StopChecker: a request's output text, grown token by token, with stop strings found across token boundaries
and stop regexes searched in it."""
from __future__ import annotations

import re
from typing import Sequence

from ..tokenizer import IncrementalDetokenizer


class StopChecker:
    """Invariant: `text` is the decoded output so far (cut at a matched stop string); `streamed` characters of it
    have been handed out by `stream_delta`, never a prefix of a stop string that might still complete."""

    def __init__(self, tokenizer, stop: Sequence[str] = (), skip_special_tokens: bool = True,
                 no_stop_trim: bool = False, stop_regex: Sequence[str] = ()):
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
        self.stop = tuple(stop)
        # a stop regex ends generation at the token that completes a match; the text keeps that token whole
        # (SGLang's behaviour: no trim), and `matched` is the pattern
        self.stop_regex = tuple(stop_regex)
        self._regexes = [re.compile(p) for p in self.stop_regex]
        self.no_stop_trim = no_stop_trim
        self.max_stop_len = max((len(s) for s in self.stop), default=0)
        self.text = ""
        self.streamed = 0
        self.stopped = False

    def push(self, token_ids: Sequence[int]) -> str | None:
        """Appends the tokens' text; returns the stop string that now occurs (text cut there), or None."""
        if self.stopped:
            return None
        old = len(self.text)
        self.text += self.detok.push(token_ids)
        return self._find_stop(old) or self._find_stop_regex(old)

    def flush(self) -> None:
        """At the end of generation: the text of a dangling partial character, if any."""
        if not self.stopped:
            self.text += self.detok.flush()

    def _find_stop(self, old_len: int) -> str | None:
        if not self.stop or len(self.text) == old_len:
            return None
        begin = max(0, old_len - self.max_stop_len + 1)  # a match must end inside the new text
        best, best_at = None, len(self.text)
        for s in self.stop:
            at = self.text.find(s, begin)
            if at != -1 and at < best_at:
                best, best_at = s, at
        if best is not None:
            self.text = self.text[:best_at + (len(best) if self.no_stop_trim else 0)]
            self.stopped = True
        return best

    def _find_stop_regex(self, old_len: int) -> str | None:
        """The first stop regex found in the text, searched whole each time it grows (a match may start anywhere,
        and a lookahead may complete an earlier one)."""
        if not self._regexes or len(self.text) == old_len:
            return None
        for pattern, rx in zip(self.stop_regex, self._regexes):
            if rx.search(self.text):
                self.stopped = True
                return pattern
        return None

    def stream_delta(self, final: bool) -> str:
        """New text safe to show: holds back a tail that could still become a stop string (unless final)."""
        end = len(self.text)
        if not final and not self.stopped and self.stop:
            end -= self._partial_stop_len()
        end = max(end, self.streamed)
        delta, self.streamed = self.text[self.streamed:end], end
        return delta

    def _partial_stop_len(self) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        longest = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self.text)), longest, -1):
                if self.text.endswith(s[:k]):
                    longest = k
                    break
        return longest
