"""How large a regex grows once its counted repetitions are unrolled, read from Python's own parse of it before
any automaton is built: `a{0,5000}` is 5,000 positions, `(a{1,100}){1,100}` 10,000. The automaton builder
unrolls `{m,n}`, so its time and memory follow this number, not the pattern's length."""
from __future__ import annotations

import re._constants as sre
import re._parser as sre_parse

from ..budget import CompileBudgetExceeded

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def check_unrolled_size(pattern: str, limit: int) -> None:
    """Raises CompileBudgetExceeded naming the largest counted repetition when `pattern` unrolls to more than
    `limit` positions. `pattern` must already parse (re.compile)."""
    largest: list[tuple[int, str]] = []   # (positions, how the repetition is written)

    def size(sub) -> int:
        total = 0
        for op, av in sub:
            if op in _REPEATS:
                lo, hi, body = av
                inner = size(body)
                copies = lo + 1 if hi == sre.MAXREPEAT else max(hi, 1)
                total += inner * copies
                if lo > 1 or hi != sre.MAXREPEAT:
                    bound = f"{{{lo},}}" if hi == sre.MAXREPEAT else f"{{{lo},{hi}}}"
                    largest.append((inner * copies, bound))
            elif op is sre.SUBPATTERN:
                total += size(av[3])
            elif op is sre.ATOMIC_GROUP:
                total += size(av)
            elif op is sre.BRANCH:
                total += sum(size(b) for b in av[1])
            else:
                total += 1
        return total

    n = size(sre_parse.parse(pattern))
    if n > limit:
        worst = max(largest)[1] if largest else "the pattern"
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: its counted repetition {worst} unrolls to {n:,} "
                                    f"positions, past the compile budget of {limit:,}; use a smaller count "
                                    "or an unbounded repetition (*, +)")
