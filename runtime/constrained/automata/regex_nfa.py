"""Python regex syntax -> CharFSM, our own front end: the standard library's parser reads the pattern, its tree
is lowered to an NFA whose edges carry codepoint ranges, and a subset construction over a partition of those
ranges makes the DFA. `\\w` is its 734 ranges, `[^a]` two: no step walks code points one by one, except
IGNORECASE adding the case partners of the cased letters in a class (class tables: unicode_classes.py).

Counted repetition costs what the automaton needs, not n copies of everything:
- `X{m,n}` is m copies of X then n - m nested optionals, X(X(X)?)?, whose subset states stay as small as X's
  (X?X?X? would put every later copy in each state, n^2 work);
- a single character class repeated, also through nested counts, is one chain of states sharing one range
  tuple: `(a{1,100}){1,100}` is `a{1,10000}` (its lengths are contiguous); a whole pattern that is one such
  chain (`[\\s\\S]{0,5000}`, `\\d{1,20}`) becomes its DFA directly, without a subset construction.

What it still costs: unanchored (search) patterns put every pending copy of a count in one subset, so a JSON
Schema `pattern: "a{1000}"` takes about 2 s (n^2), and the time budget stops larger ones. Both stages have
budget checkpoints (budget.checkpoint) and stop past `limit` states."""
from __future__ import annotations

import re
from dataclasses import dataclass

try:                                     # Python 3.11+
    import re._constants as sre
    import re._parser as sre_parse
except ImportError:                      # pragma: no cover - older Pythons name them sre_*
    import sre_constants as sre          # type: ignore[no-redef]
    import sre_parse                     # type: ignore[no-redef]

from ..budget import CompileBudgetExceeded, checkpoint
from ..errors import GrammarError
from .charfsm import ANY_CHAR, CharFSM, _minus_surrogates, complement, make_ranges
from .unicode_classes import class_ranges, fold_case

Span = tuple[tuple[int, int], ...]

_CATEGORIES = {sre.CATEGORY_DIGIT: ("d", False), sre.CATEGORY_NOT_DIGIT: ("d", True),
               sre.CATEGORY_SPACE: ("s", False), sre.CATEGORY_NOT_SPACE: ("s", True),
               sre.CATEGORY_WORD: ("w", False), sre.CATEGORY_NOT_WORD: ("w", True)}
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)   # lazy and greedy match the same strings under fullmatch
_UNSUPPORTED = {sre.GROUPREF: "backreferences", sre.GROUPREF_EXISTS: "conditional groups (?(1)..)",
                sre.ASSERT: "lookaround", sre.ASSERT_NOT: "lookaround",
                sre.AT: "anchors other than ^ at the very start and $ at the very end"}
for _name in ("POSSESSIVE_REPEAT", "ATOMIC_GROUP"):        # Python 3.11+; they change which strings match
    if hasattr(sre, _name):
        _UNSUPPORTED[getattr(sre, _name)] = "possessive quantifiers and atomic groups"


class RegexUnsupported(GrammarError):
    """Valid regex syntax that the automaton builder cannot express (lookaround, backreferences, \\p{..})."""


def parse(pattern: str):
    """The standard library's parse tree of `pattern` (raises re.error when it is not a regex)."""
    return sre_parse.parse(pattern)


@dataclass
class NFA:
    """States 0..n-1; `edges[s]` are (ranges, target) pairs, `eps[s]` the targets reached without reading."""
    limit: int
    edges: list
    eps: list

    def new(self) -> int:
        n = len(self.edges)
        if n >= self.limit:
            raise OverflowError(n)
        if n % 4096 == 0:
            checkpoint("a regex's automaton")
        self.edges.append([])
        self.eps.append([])
        return n


class Lowering:
    """Parse tree -> NFA fragments (start, end). `reading` is how \\d \\w \\s read (unicode_classes.READINGS)."""

    def __init__(self, nfa: NFA, reading: str, pattern: str):
        self.nfa, self.reading, self.pattern = nfa, reading, pattern

    def refuse(self, what: str):
        raise RegexUnsupported(f"regex {self.pattern!r} uses syntax the automaton builder cannot handle: {what}")

    def seq(self, items, flags: int) -> tuple[int, int]:
        start = end = self.nfa.new()
        for op, av in items:
            a, b = self.item(op, av, flags)
            self.nfa.eps[end].append(a)
            end = b
        return start, end

    def item(self, op, av, flags: int) -> tuple[int, int]:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            return self.chain(self.charset(op, av, flags), 1, 1)
        if op is sre.SUBPATTERN:
            _, add, drop, body = av
            return self.seq(body, (flags | add) & ~drop)
        if op is sre.BRANCH:
            start, end = self.nfa.new(), self.nfa.new()
            for alt in av[1]:
                a, b = self.seq(alt, flags)
                self.nfa.eps[start].append(a)
                self.nfa.eps[b].append(end)
            return start, end
        if op in _REPEATS:
            return self.repeat(av, flags)
        if op in (sre.ASSERT, sre.ASSERT_NOT) and not av[1]:   # (?!) matches nothing, (?=) the empty string
            start, end = self.nfa.new(), self.nfa.new()
            if op is sre.ASSERT:
                self.nfa.eps[start].append(end)
            return start, end
        self.refuse(_UNSUPPORTED.get(op, str(op).lower()))

    def repeat(self, av, flags: int) -> tuple[int, int]:
        lo, hi, body = av
        hi = None if hi == sre.MAXREPEAT else hi
        single = self.counted_class([(sre.MAX_REPEAT, av)], flags)
        if single is not None:
            return self.chain(*single)
        nfa = self.nfa
        start = end = nfa.new()
        for _ in range(lo):
            a, b = self.seq(body, flags)
            nfa.eps[end].append(a)
            end = b
        out = nfa.new()
        if hi is None:                         # X*: a loop through one more copy
            a, b = self.seq(body, flags)
            nfa.eps[end] += [a, out]
            nfa.eps[b].append(end)
            return start, out
        for _ in range(hi - lo):               # X(X(X)?)?: every copy may stop, none is skipped
            a, b = self.seq(body, flags)
            nfa.eps[end] += [out, a]
            end = b
        nfa.eps[end].append(out)
        return start, out

    def chain(self, span: Span, lo: int, hi: int | None) -> tuple[int, int]:
        """`span` read lo to hi times (hi None: unbounded): one state per count, the range tuple shared."""
        nfa = self.nfa
        start = end = nfa.new()
        for _ in range(lo):
            n = nfa.new()
            nfa.edges[end].append((span, n))
            end = n
        if hi is None:
            nfa.edges[end].append((span, end))
            return start, end
        if hi == lo:
            return start, end
        out = nfa.new()
        for _ in range(hi - lo):
            n = nfa.new()
            nfa.eps[end].append(out)
            nfa.edges[end].append((span, n))
            end = n
        nfa.eps[end].append(out)
        return start, out

    def counted_class(self, items, flags: int) -> tuple[Span, int, int | None] | None:
        """(class, lo, hi) when `items` match exactly the strings of one character class repeated lo..hi times
        (hi None: unbounded), else None. Nested counts combine while their lengths stay contiguous."""
        if len(items) != 1:
            return None
        op, av = items[0]
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            return self.charset(op, av, flags), 1, 1
        if op is sre.SUBPATTERN:
            return self.counted_class(av[3], (flags | av[1]) & ~av[2])
        if op not in _REPEATS:
            return None
        m, n, body = av
        n = None if n == sre.MAXREPEAT else n
        inner = self.counted_class(body, flags)
        if inner is None:
            return None
        span, a, b = inner
        if b == 0 or n == 0:
            return span, 0, 0
        # lengths are the union over k in [m, n] of [k*a, k*b]; contiguous iff the first gap closes
        if (n is None or m < n) and not (a <= 1 if m == 0 else (b is None or a - 1 <= m * (b - a))):
            return None
        return span, m * a, None if (n is None or b is None) else n * b

    def charset(self, op, av, flags: int) -> Span:
        """The codepoints one LITERAL / NOT_LITERAL / ANY / IN item matches, as ranges."""
        fold = bool(flags & re.IGNORECASE)
        if op is sre.ANY:
            return ANY_CHAR if flags & re.DOTALL else tuple(complement([(10, 10)]))
        if op in (sre.LITERAL, sre.NOT_LITERAL):
            spans = [(av, av)]
            spans = fold_case(spans) if fold else spans
            return _normalize(complement(spans) if op is sre.NOT_LITERAL else spans)
        negate, spans, classes = False, [], []
        for o, v in av:
            if o is sre.NEGATE:
                negate = True
            elif o is sre.LITERAL:
                spans.append((v, v))
            elif o is sre.RANGE:
                spans.append(v)
            elif o is sre.CATEGORY:
                letter, neg = _CATEGORIES[v]
                reading = "ascii" if self.reading == "python" and flags & re.ASCII else self.reading
                cls = list(class_ranges(letter, reading))
                classes += complement(cls) if neg else cls
            else:
                self.refuse(f"{o} in a character class")
        spans = (fold_case(spans) if fold else spans) + classes
        return _normalize(complement(spans) if negate else spans)


def _normalize(spans) -> Span:
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple(_minus_surrogates([(a, b) for a, b in out]))


class MixedCount(Exception):
    """A character that the counter's loop and something else could both read (regex_counter.py)."""


def determinize(nfa: NFA, start: int, final: int, limit: int, counter: int = -1) -> CharFSM:
    """Subset construction over the ranges of each subset's edges (a sweep over their ends). A subset is the
    set of its states that read or accept, so equal subsets are found whatever epsilon path led there. Raises
    OverflowError past `limit` states. `counter`: an NFA state whose one edge loops on itself (and no other
    edge enters it); the DFA transitions that read by that edge are `counted`, and one that reads by it and by
    another edge raises MixedCount (which of them read the character, and so the count, would be unknown)."""
    edges, eps = nfa.edges, nfa.eps
    closures: dict[int, frozenset] = {}

    def closure(s: int) -> frozenset:
        c = closures.get(s)
        if c is None:
            seen, todo = {s}, [s]
            while todo:
                for t in eps[todo.pop()]:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            c = closures[s] = frozenset(t for t in seen if edges[t] or t == final)
        return c

    first = closure(start)
    index: dict[frozenset, int] = {first: 0}
    order = [first]
    by_kernel: dict[frozenset, int] = {}

    def state_of(kernel: frozenset) -> int:
        k = by_kernel.get(kernel)
        if k is None:
            target = closure(next(iter(kernel))) if len(kernel) == 1 else frozenset().union(*map(closure, kernel))
            k = index.get(target)
            if k is None:
                k = index[target] = len(order)
                order.append(target)
                if k > limit:
                    raise OverflowError(k)
                if k % 256 == 0:
                    checkpoint("a regex's automaton")
            by_kernel[kernel] = k
        return k

    trans = []
    counted: set[tuple[int, int]] = set()
    i = 0
    while i < len(order):
        subset = order[i]
        i += 1
        readers = [s for s in subset if edges[s]]
        if len(readers) == 1 and len(edges[readers[0]]) == 1:      # a chain's state: no sweep needed
            span, t = edges[readers[0]][0]
            k = state_of(frozenset((t,)))
            trans.append(tuple((a, b, k) for a, b in span))
            if t == counter:
                counted.update((i - 1, a) for a, _ in span)
            continue
        events = []
        for s in subset:
            for span, t in edges[s]:
                for a, b in span:
                    events.append((a, 1, t))
                    events.append((b + 1, -1, t))
        events.sort()
        active: dict[int, int] = {}
        out, j, prev = [], 0, 0
        while j < len(events):
            pos = events[j][0]
            if active and prev < pos:
                k = state_of(frozenset(active))
                if counter in active:
                    if len(active) > 1:
                        raise MixedCount(prev)
                    k = ~k                   # kept apart from uncounted ranges into the same state
                out.append((prev, pos - 1, k))
            while j < len(events) and events[j][0] == pos:
                _, d, t = events[j]
                c = active.get(t, 0) + d
                if c:
                    active[t] = c
                else:
                    del active[t]
                j += 1
            prev = pos
        ranges = make_ranges(out)
        if counter >= 0:
            counted.update((i - 1, a) for a, _, k in ranges if k < 0)
            ranges = tuple((a, b, ~k if k < 0 else k) for a, b, k in ranges)
        trans.append(ranges)
    finals = {k: True for st, k in index.items() if final in st}
    return CharFSM(0, tuple(trans), finals, frozenset(counted))


def build_char_fsm(pattern: str, body, reading: str, search_start: bool, search_end: bool,
                   limit: int) -> CharFSM:
    """The CharFSM of the parsed `body` (of `pattern`, named in errors), with any text allowed before it
    (`search_start`) and after it (`search_end`). Raises RegexUnsupported, or CompileBudgetExceeded past `limit`
    NFA or DFA states."""
    nfa = NFA(4 * limit, [], [])
    low = Lowering(nfa, reading, pattern)
    single = None if search_start or search_end else low.counted_class(list(body), body.state.flags)
    if single is not None:               # one class counted: the DFA is the chain itself
        span, lo, hi = single
        n = lo + 1 if hi is None else hi + 1
        if n > limit + 1:
            raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: its automaton passes {limit:,} states, the most "
                                        "a regex may build; use smaller counts or fewer alternatives")
        trans = [tuple((a, b, i + 1) for a, b in span) for i in range(n - 1)]
        trans.append(tuple((a, b, n - 1) for a, b in span) if hi is None else ())
        return CharFSM(0, tuple(trans), {i: True for i in range(lo, n)})
    try:
        start, end = low.seq(body, body.state.flags)
        if search_start:
            pre = nfa.new()
            nfa.edges[pre].append((ANY_CHAR, pre))
            nfa.eps[pre].append(start)
            start = pre
        if search_end:
            post = nfa.new()
            nfa.edges[post].append((ANY_CHAR, post))
            nfa.eps[end].append(post)
            end = post
        return determinize(nfa, start, end, limit)
    except OverflowError:
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: its automaton passes {limit:,} states, the most a "
                                    "regex may build; use smaller counts or fewer alternatives") from None
