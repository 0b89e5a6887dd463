"""How large a regex grows once its counted repetitions are unrolled, read from Python's own parse of it before
any automaton is built: `a{0,5000}` is 5,000 positions, `(a{1,100}){1,100}` 10,000. The automaton builder
unrolls `{m,n}`, so its time and memory follow this number, not the pattern's length."""
from __future__ import annotations

import re._constants as sre
import re._parser as sre_parse

from ..budget import CompileBudgetExceeded

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def check_unrolled_size(pattern: str, limit: int) -> None:
    """Raises CompileBudgetExceeded naming the largest counted repetition when unrolling `pattern`'s counted
    repetitions adds more than `limit` positions to it (a long pattern without them, such as 2,000 literal
    alternatives, is as large as it is written and passes). `pattern` must already parse (re.compile)."""
    largest: list[tuple[int, str]] = []   # (positions, how the repetition is written)

    def size(sub, unroll: bool = True) -> int:
        total = 0
        for op, av in sub:
            if op in _REPEATS:
                lo, hi, body = av
                inner = size(body, unroll)
                copies = (lo + 1 if hi == sre.MAXREPEAT else max(hi, 1)) if unroll else 1
                total += inner * copies
                if lo > 1 or hi != sre.MAXREPEAT:
                    bound = f"{{{lo},}}" if hi == sre.MAXREPEAT else f"{{{lo},{hi}}}"
                    largest.append((inner * copies, bound))
            elif op is sre.SUBPATTERN:
                total += size(av[3], unroll)
            elif op is sre.ATOMIC_GROUP:
                total += size(av, unroll)
            elif op is sre.BRANCH:
                total += sum(size(b, unroll) for b in av[1])
            else:
                total += 1
        return total

    parsed = sre_parse.parse(pattern)
    n = size(parsed)
    if n - size(parsed, unroll=False) > limit:
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: its counted repetition {max(largest)[1]} unrolls to "
                                    f"{n:,} positions, past the compile budget of {limit:,}; use a smaller count "
                                    "or an unbounded repetition (*, +)")
