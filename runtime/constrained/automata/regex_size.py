"""How large a regex grows once its counted repetitions are unrolled, read from Python's own parse of it before
any automaton is built: `a{0,5000}` is 5,000 positions, `(a{1,100}){1,100}` 10,000. The automaton builder
(regex_nfa.py) keeps a state per count, so its states, and the byte automaton's after it, follow this number:
regex.py refuses past regex.MAX_REGEX_STATES before building anything."""
from __future__ import annotations

import re._constants as sre
import re._parser as sre_parse

from ..budget import CompileBudgetExceeded

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def check_unrolled_size(pattern: str, limit: int, tree=None) -> None:
    """Raises CompileBudgetExceeded naming the largest counted repetition when unrolling `pattern`'s counted
    repetitions adds more than `limit` positions to it (a long pattern without them, such as 2,000 literal
    alternatives, is as large as it is written and passes). `pattern` must already parse (re.compile); `tree`:
    its parse, where the caller has it (a regex is parsed once per compile)."""
    largest: list[tuple[int, str]] = []   # (positions, how the repetition is written)
    parsed = sre_parse.parse(pattern) if tree is None else tree
    n = _size(parsed, True, largest)
    if n - _size(parsed, False) > limit:
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: its counted repetition {max(largest)[1]} unrolls to "
                                    f"{n:,} positions, past the compile budget of {limit:,}; use a smaller count "
                                    "or an unbounded repetition (*, +)")


def unrolled_extra(items) -> int:
    """The positions unrolling adds to a parsed sequence's counted repetitions (check_unrolled_size's figure)."""
    return _size(items, True) - _size(items, False)


def positions(pattern: str, tree=None) -> int:
    """The regex's size as written (each literal, class or anchor one position), counted repetitions not unrolled:
    what the automaton builder's work grows with apart from them. `tree`: its parse, if the caller has it."""
    return _size(sre_parse.parse(pattern) if tree is None else tree, False)


def _size(sub, unroll: bool, largest: list[tuple[int, str]] | None = None) -> int:
    """Positions of a parsed regex, each counted repetition unrolled or not; with `largest`, each counted
    repetition's unrolled size and how it is written are appended to it."""
    total = 0
    for op, av in sub:
        if op in _REPEATS:
            lo, hi, body = av
            inner = _size(body, unroll, largest)
            copies = (lo + 1 if hi == sre.MAXREPEAT else max(hi, 1)) if unroll else 1
            total += inner * copies
            if largest is not None and (lo > 1 or hi != sre.MAXREPEAT):
                bound = f"{{{lo},}}" if hi == sre.MAXREPEAT else f"{{{lo},{hi}}}"
                largest.append((inner * copies, bound))
        elif op is sre.SUBPATTERN:
            total += _size(av[3], unroll, largest)
        elif op is sre.ATOMIC_GROUP:
            total += _size(av, unroll, largest)
        elif op is sre.BRANCH:
            total += sum(_size(b, unroll, largest) for b in av[1])
        else:
            total += 1
    return total


def literal_alternatives(pattern: str, limit: int = 100_000, tree=None) -> list[str] | None:
    """The words of a pattern that matches a finite set of at most `limit` strings and has no repetition or
    class range (`(?:w0|w1|...)`, as GBNF and Lark write a rule of keywords), else None. Such a pattern is a word
    set: a trie builds it in time linear in its length, where the general builder takes seconds for a few
    thousand alternatives. `tree`: its parse, if the caller has it."""
    parsed = sre_parse.parse(pattern) if tree is None else tree
    if parsed.state.flags & ~sre.SRE_FLAG_UNICODE:
        return None                       # IGNORECASE and the like change what a literal matches
    if not any(op is sre.BRANCH or op is sre.IN for op, _ in _walk(parsed)):
        return None                       # one plain word: the general builder is fast enough
    words = _words(parsed, limit)
    return None if words is None else sorted(words)


def _walk(seq):
    for op, av in seq:
        yield op, av
        if op is sre.SUBPATTERN:
            yield from _walk(av[3])
        elif op is sre.BRANCH:
            for b in av[1]:
                yield from _walk(b)


def _words(seq, limit: int) -> set[str] | None:
    """The strings a parsed sequence matches, if it is made of literals, sets of literals, flag-free groups and
    alternations and they number at most `limit`; else None."""
    out = {""}
    for op, av in seq:
        if op is sre.LITERAL:
            choices = {chr(av)}
        elif op is sre.IN and all(o is sre.LITERAL for o, _ in av):
            choices = {chr(v) for _, v in av}
        elif op is sre.SUBPATTERN and not av[1] and not av[2]:
            choices = _words(av[3], limit)
        elif op is sre.BRANCH:
            choices = set()
            for b in av[1]:
                w = _words(b, limit)
                if w is None:
                    return None
                choices |= w
        else:
            return None
        if choices is None or len(out) * len(choices) > limit:
            return None
        out = {a + b for a in out for b in choices}
    return out
