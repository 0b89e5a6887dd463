"""Generation mode for JSON numbers: at most `k` digits in a row.

A small model left to write an unbounded number can repeat a digit until it runs out of tokens (`0.99999...`,
`1111...`), so a valid value never ends. A float64 holds 15-17 significant digits, so in generation mode
("compact" JSON) each run of digits in a number lexeme (integer part, fraction, exponent) is capped at
`NUMBER_DIGITS`: the grammar then forces the number to end or move on. Every capped output is still valid;
the cap only narrows which valid texts can be generated, like the whitespace mode. Where the cap would leave a
number with no value at all (an integer `minimum` of 1e20, say), the number is left uncapped."""
from __future__ import annotations

from .byte_dfa import ByteDFA, trimmed_dfa

NUMBER_DIGITS = 16
NUMBER_BYTES = frozenset(b"-+.eE0123456789")
DIGITS = frozenset(b"0123456789")


def is_number_dfa(dfa: ByteDFA) -> bool:
    """Whether every byte the DFA can read is a number byte (a number lexeme, or an enum of numbers)."""
    used = (dfa.table >= 0).any(axis=0)
    return bool(used.any()) and all(b in NUMBER_BYTES for b in used.nonzero()[0].tolist())


def cap_digit_runs(dfa: ByteDFA, k: int = NUMBER_DIGITS) -> ByteDFA:
    """The product of `dfa` with "no more than k consecutive digits" (states are (dfa state, run length)).
    Returns `dfa` itself when the cap would leave it empty or changes nothing reachable."""
    index = {(dfa.start, 0): 0}
    order = [(dfa.start, 0)]
    rows, acc = [], []
    capped = False
    i = 0
    while i < len(order):
        s, run = order[i]
        i += 1
        row = [-1] * 256
        for b, t in enumerate(dfa.table_list[s]):
            if t < 0:
                continue
            r = run + 1 if b in DIGITS else 0
            if r > k:
                capped = True
                continue
            key = (t, r)
            j = index.get(key)
            if j is None:
                j = index[key] = len(order)
                order.append(key)
            row[b] = j
        rows.append(row)
        acc.append(dfa.accepting_list[s])
    if not capped:
        return dfa
    out = trimmed_dfa(rows, 0, acc, {}, [False] * len(rows))
    return dfa if out.is_empty() else out
