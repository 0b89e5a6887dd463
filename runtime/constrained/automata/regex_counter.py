"""A regex's one large counted repetition of a character class kept as a counter, not unrolled.

`prefix X{m,n} suffix` (X one character class, the count possibly nested: `(a{1,100}){1,100}` is `a{1,10000}`)
becomes the automaton of `prefix X* suffix` whose transitions by which the loop reads a character are marked
counted (CharFSM.counted, then ByteDFA.count on the byte that ends the character). The lexeme counts them in its
parse frame (LexNode min_chars = m, max_chars = n), so `a{0,100000}` is one loop state, not 100,001.

This is exact because the count is unambiguous: the repetition is an item of the top-level sequence, so every
match passes through the loop once, and the subset construction refuses (MixedCount) any DFA transition that
the loop and something else could both take (`a{0,3000}a*`): then every path alive after a text has read the
same number of characters through the loop. The count is final once the loop is left (ByteDFA.frozen), so the
least, m, is checked there and at acceptance. A pattern with two large counts keeps the larger as the counter
and unrolls the other (regex.MAX_REGEX_STATES bounds that); where the count is ambiguous the pattern is
unrolled if it is small enough, else refused naming the repetition."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..budget import CompileBudgetExceeded, current
from .charfsm import CharFSM
from .regex import MAX_REGEX_STATES, _has_bare, _strip_anchors, check_regex
from .regex_nfa import _REPEATS, NFA, Lowering, MixedCount, determinize, parse
from .regex_size import check_unrolled_size, positions, unrolled_extra

# a counted repetition of a class is kept as a counter past this many copies, or past COUNTER_COPIES_WIDE for a
# class of many ranges (a Unicode \w is 734 ranges, some 300 byte states a copy once unrolled)
COUNTER_COPIES = 64
COUNTER_COPIES_WIDE = 8
WIDE_RANGES = 8


@dataclass(frozen=True)
class CountedRegex:
    """The automaton of a full-match regex with its counted transitions, and the bounds the count must end in."""
    fsm: CharFSM
    min_count: int
    max_count: int | None       # None: no upper bound
    written: str                # the repetition as written, e.g. {1,100000}, for messages


def counted_regex(pattern: str) -> CountedRegex | None:
    """`pattern` (full match, Python syntax, ^/$ optional: compile_regex's) with its largest counted repetition
    of a character class as a counter, or None where it has none large enough, or where the count would be
    ambiguous and the pattern unrolled is within regex.MAX_REGEX_STATES (regex_to_char_fsm builds it then).
    Raises GrammarError for an invalid pattern, CompileBudgetExceeded where the ambiguous pattern is too large
    to unroll or the rest of it is (naming the repetition)."""
    check_regex(pattern)
    body, _, _ = _strip_anchors(pattern)
    if _has_bare(body, "^$"):
        return None                      # regex_to_char_fsm refuses it by name
    try:
        tree = parse(body)
    except re.error:
        return None
    flags = tree.state.flags
    items = list(tree)
    nfa = NFA(4 * MAX_REGEX_STATES, [], [])
    low = Lowering(nfa, "python", pattern)
    best = None
    for i, (op, av) in enumerate(items):
        if op not in _REPEATS:
            continue
        single = low.counted_class([(op, av)], flags)
        if single is None:
            continue
        span, lo, hi = single
        copies = lo if hi is None else hi
        if copies > COUNTER_COPIES or (copies > COUNTER_COPIES_WIDE and len(span) > WIDE_RANGES):
            weight = copies * len(span)
            if best is None or weight > best[0]:
                best = (weight, i, span, lo, hi)
    if best is None:
        return None
    _, i, span, lo, hi = best
    written = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    if unrolled_extra(items[:i] + items[i + 1:]) > MAX_REGEX_STATES:
        return None                      # two large counts: regex_to_char_fsm refuses, naming the larger
    budget = current()
    size = positions(body, tree)
    if budget is not None and size > budget.regex_positions:
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: {size:,} positions, past the compile budget of "
                                    f"{budget.regex_positions:,}; split it or use fewer alternatives")
    try:
        start, end = low.seq(items[:i], flags)
        loop = nfa.new()
        nfa.eps[end].append(loop)
        nfa.edges[loop].append((span, loop))
        after, final = low.seq(items[i + 1:], flags)
        nfa.eps[loop].append(after)
        fsm = determinize(nfa, start, final, MAX_REGEX_STATES, counter=loop)
    except MixedCount:
        try:
            check_unrolled_size(pattern, MAX_REGEX_STATES, tree)
        except CompileBudgetExceeded:
            raise CompileBudgetExceeded(
                f"regex {pattern[:80]!r}: its counted repetition {written} cannot be kept as a counter (what is "
                "next to it reads the same characters, so which of them it counted is unknown), and unrolled it "
                f"passes {MAX_REGEX_STATES:,} positions; use a smaller count, or separate it from what reads "
                "the same characters") from None
        return None
    except OverflowError:
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: its automaton passes {MAX_REGEX_STATES:,} states, "
                                    "the most a regex may build; use smaller counts or fewer alternatives") from None
    return CountedRegex(fsm, lo, hi, written)
