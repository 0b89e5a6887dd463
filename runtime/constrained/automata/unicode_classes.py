"""The codepoint ranges of the regex classes `\\d`, `\\w` and `\\s` in each reading we compile:

- "python": Python's `re` on str patterns (Unicode: `\\w` takes `日` and `é`, `\\d` takes `٣`);
- "ascii": Python's `re` under the (?a) flag, and ECMA-262's `\\d` and `\\w` ([0-9], [A-Za-z0-9_]);
- "ecma": JSON Schema `pattern` (ECMA-262): `\\d` and `\\w` as ASCII, `\\s` as ECMA's WhiteSpace and
  LineTerminator (the Unicode space separators, NBSP, BOM, U+2028/U+2029 and the ASCII spaces).

The Unicode tables are read from `re` itself, so they agree with `re.fullmatch` by construction: once per
process and class, only when a pattern uses it, about 0.1 s a class on a 2-core Xeon (never at import). The
IGNORECASE classes come from the same source (`_sre`'s simple lowercase and `re._casefix`), 0.13 s once."""
from __future__ import annotations

import bisect
import re
from functools import lru_cache

from .charfsm import MAX_CP, SURROGATES

Span = tuple[tuple[int, int], ...]   # sorted disjoint (lo, hi) codepoint ranges, surrogates never included

_ASCII = {"d": ((0x30, 0x39),), "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
          "s": ((0x09, 0x0D), (0x20, 0x20))}
_ECMA_SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
               (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
READINGS = ("python", "ascii", "ecma")


def class_ranges(letter: str, reading: str) -> Span:
    """The ranges of `\\d`, `\\w` or `\\s` (`letter` "d", "w" or "s") in `reading` (see READINGS)."""
    if reading == "python":
        return _python_class(letter)
    if reading == "ecma" and letter == "s":
        return _ECMA_SPACE
    return _ASCII[letter]


@lru_cache(maxsize=3)
def _python_class(letter: str) -> Span:
    import numpy as np
    # every codepoint but the surrogates, in order: index i is codepoint i below U+D800, i + 0x800 above
    gap = SURROGATES[1] - SURROGATES[0] + 1
    cps = np.concatenate([np.arange(SURROGATES[0], dtype="<u4"),
                          np.arange(SURROGATES[1] + 1, MAX_CP + 1, dtype="<u4")])
    text = cps.tobytes().decode("utf-32-le")

    def cp(i: int) -> int:
        return i if i < SURROGATES[0] else i + gap

    spans = []
    for m in re.finditer(f"\\{letter}+", text):
        a, b = m.start(), m.end() - 1
        if a < SURROGATES[0] <= b:                      # a run across the gap is two ranges
            spans += [(a, SURROGATES[0] - 1), (SURROGATES[1] + 1, cp(b))]
        else:
            spans.append((cp(a), cp(b)))
    return tuple(spans)


@lru_cache(maxsize=1)
def case_classes() -> dict[int, tuple[int, ...]]:
    """Each cased codepoint -> every codepoint `re` matches it with under IGNORECASE (itself included): those
    with the same simple lowercase, and `re`'s extra cases (`ſ` with `s`, `K` Kelvin with `k`)."""
    import _sre
    from re import _casefix
    by_lower: dict[int, set[int]] = {}
    for c in range(MAX_CP + 1):
        if _sre.unicode_iscased(c):
            by_lower.setdefault(_sre.unicode_tolower(c), set()).add(c)
    out: dict[int, tuple[int, ...]] = {}
    for group in by_lower.values():
        lowers = {_sre.unicode_tolower(c) for c in group}
        extra = {e for lo in lowers for e in _casefix._EXTRA_CASES.get(lo, ())}
        members = set(group)
        for e in extra:
            members |= by_lower.get(_sre.unicode_tolower(e), {e})
        for c in group:
            out[c] = tuple(sorted(members))
    return out


def fold_case(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` with every codepoint `re` treats as the same letter under IGNORECASE added."""
    classes = case_classes()
    extra = []
    cased = sorted(classes)
    for a, b in spans:
        i = bisect.bisect_left(cased, a)
        while i < len(cased) and cased[i] <= b:
            extra += [(c, c) for c in classes[cased[i]]]
            i += 1
    return spans + extra
