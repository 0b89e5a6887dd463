"""Field confidence: how sure the model was of each value of a record, from its own log-probabilities.

    field_confidence('{"eps": 1.12, "company": "Northwind"}', entries)
      -> {"/eps": 0.94, "/company": 0.71}

`entries` are the output's constrained logprobs (sglite.protocol.ConstrainedLogprob: each token's log-probability
under the distribution it was chosen from, after the grammar's mask, with the text it adds). A value's confidence
is the probability the model gave that value, where the grammar left it a choice: the product, over the tokens
that wrote it, of each token's probability among the tokens the grammar allowed there. The tokens of a value are
those overlapping its text (a string with its quotes) and, for a number, true, false or null, also the token
after it, since choosing where a number ends is part of choosing it (12 or 125). A token the grammar forced
counts 1. So a grounded number the document writes once, where the model hesitated between it and the prior
year's figure, scores about the share it gave it; a value the grammar fixed scores 1.

Keys are JSON pointers to every scalar of the record (null and booleans included: "not stated" is a choice
too). Tokens are placed by their texts, which concatenate to the output text; a value whose tokens cannot be
placed (an output whose texts do not add up to it) gets no entry."""
from __future__ import annotations

import json
import math
from typing import Any, Iterator

BUCKETS = (0.5, 0.8, 0.95)   # upper bounds of the low buckets; the last bucket is [0.95, 1]


def field_confidence(text: str, entries: list) -> dict[str, float]:
    """{JSON pointer: probability in [0, 1]} of every scalar value in the JSON text `text` (a generated record),
    from its constrained logprob entries [(logprob, token_id, token_text), ...]."""
    ends, at = [], 0
    for entry in entries:
        at += len(entry[2])
        ends.append(at)
    if at < len(text) or "".join(e[2] for e in entries)[:len(text)] != text:
        return {}
    out = {}
    starts = [0, *ends[:-1]]
    for pointer, start, end, closed in value_ranges(text):
        stop = end if closed else end + 1   # a number's end is decided by the token after it
        total = 0.0
        for k, (a, b) in enumerate(zip(starts, ends)):
            if b > start and a < stop:
                lp = entries[k][0]
                total += lp if lp is not None else 0.0
        out[pointer] = round(math.exp(total), 4)
    return out


def value_ranges(text: str) -> Iterator[tuple[str, int, int, bool]]:
    """(JSON pointer, start, end, closed) of every scalar value in the JSON text, depth first: character offsets
    (end exclusive; a string's include its quotes); `closed`: the value's text ends itself (a string), rather
    than at whatever follows it (a number or a literal). Raises ValueError on text that is not JSON."""
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def walk(i: int, pointer: str) -> Iterator[tuple[str, int, int, bool] | int]:
        i = skip(i)
        ch = text[i:i + 1]
        if ch == "{":
            i = skip(i + 1)
            if text[i:i + 1] == "}":
                yield i + 1
                return
            while True:
                key, i = decoder.raw_decode(text, skip(i))
                i = skip(i)
                if text[i:i + 1] != ":":
                    raise ValueError(f"expected ':' at {i}")
                i = yield from _inner(walk(i + 1, f"{pointer}/{_escape(key)}"))
                i = skip(i)
                if text[i:i + 1] == "}":
                    yield i + 1
                    return
                if text[i:i + 1] != ",":
                    raise ValueError(f"expected ',' or '}}' at {i}")
                i += 1
        if ch == "[":
            i = skip(i + 1)
            if text[i:i + 1] == "]":
                yield i + 1
                return
            n = 0
            while True:
                i = yield from _inner(walk(i, f"{pointer}/{n}"))
                n += 1
                i = skip(i)
                if text[i:i + 1] == "]":
                    yield i + 1
                    return
                if text[i:i + 1] != ",":
                    raise ValueError(f"expected ',' or ']' at {i}")
                i += 1
        _, end = decoder.raw_decode(text, i)
        yield (pointer, i, end, ch == '"')
        yield end

    yield from _inner(walk(0, ""))


def _inner(gen: Iterator) -> Any:
    """Re-yields a walk's value ranges and returns the offset it ends at (its last item)."""
    for item in gen:
        if isinstance(item, int):
            return item
        yield item
    raise ValueError("unexpected end of JSON text")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def bucket(p: float) -> str:
    """The confidence bucket of a probability: "<0.5", "0.5-0.8", "0.8-0.95" or ">=0.95"."""
    lows = (0.0, *BUCKETS)
    for lo, hi in zip(lows, BUCKETS):
        if p < hi:
            return f"<{hi:g}" if lo == 0 else f"{lo:g}-{hi:g}"
    return f">={BUCKETS[-1]:g}"


BUCKET_NAMES = tuple(bucket(p) for p in (0.0, *BUCKETS))
