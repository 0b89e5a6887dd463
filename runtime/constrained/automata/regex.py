"""Regex -> CharFSM via `interegular` (Python regex syntax), with the anchoring rules we need:
`compile_regex` matches the whole output; JSON Schema `pattern` searches anywhere unless anchored (^...$).

Classes: `\\d`, `\\w` and `\\s` are ASCII classes here ([0-9], [A-Za-z0-9_], [ \\t\\n\\r\\f\\v]). That is
ECMA-262's reading of `\\d` and `\\w`, right for JSON Schema `pattern`; ECMA's `\\s` also takes Unicode spaces,
and Python's `re` (compile_regex, Lark and GBNF terminals) reads all three as Unicode classes, so there `\\w+`
refuses `日本` which `re` accepts (a known gap, tests/fuzz/test_matcher_fuzz.py: spelling `\\w` out as its 734
ranges takes interegular 7.7 s)."""
from __future__ import annotations

import re
from functools import lru_cache

from ..budget import CompileBudgetExceeded, current
from ..errors import GrammarError
from .charfsm import CharFSM, from_interegular, literal_trie
from .regex_size import check_unrolled_size, literal_alternatives, positions


class RegexUnsupported(GrammarError):
    """Valid regex syntax that the automaton builder cannot express (lookaround, backreferences, \\p{..})."""


def _strip_anchors(pattern: str) -> tuple[str, bool, bool]:
    start = pattern.startswith("^")
    body = pattern[1:] if start else pattern
    end = False
    if body.endswith("$"):
        # count preceding backslashes: "\$" is a literal dollar
        n = len(body) - 1 - len(body[:-1].rstrip("\\"))
        if n % 2 == 0:
            end, body = True, body[:-1]
    return body, start, end


def _bare_chars(body: str):
    """Yields the characters of `body` that are neither escaped nor inside a character class."""
    i, in_class = 0, False
    while i < len(body):
        c = body[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if body[i + 1:i + 2] == "]":   # a ']' right after '[' is a literal member of the class
                i += 1
        else:
            yield c
        i += 1


def _has_bare(body: str, chars: str) -> bool:
    """Whether `body` has an unescaped character from `chars` outside a character class."""
    return any(c in chars for c in _bare_chars(body))


def _top_level_alternation(body: str) -> bool:
    depth = 0
    for c in _bare_chars(body):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
    return False


@lru_cache(maxsize=512)
def regex_to_char_fsm(pattern: str, search: bool = False) -> CharFSM:
    """Compile `pattern` to a CharFSM. With `search`, unanchored ends match any text (JSON Schema semantics)."""
    if re.search(r"(?<!\\)(\\\\)*\\[pP]\{", pattern):
        raise RegexUnsupported(f"regex {pattern!r}: Unicode property classes (\\p{{..}}) are not supported")
    try:
        re.compile(pattern)
    except re.error as e:
        raise GrammarError(f"invalid regex {pattern!r}: {e}") from None
    budget = current()
    if budget is not None:
        check_unrolled_size(pattern, budget.regex_positions)
    body, start, end = _strip_anchors(pattern)
    if _has_bare(body, "^$"):
        raise RegexUnsupported(f"regex {pattern!r}: anchors are only supported at the very start and end")
    if search and (start or end) and _top_level_alternation(body):
        raise RegexUnsupported(f"regex {pattern!r}: anchors with top-level '|' are ambiguous; group the "
                               "alternatives, e.g. ^(a|b)$")
    if not search:
        words = literal_alternatives(body)
        if words is not None:            # keywords, enums: a trie, linear in their length
            return literal_trie({w: True for w in words})
    written = positions(body)
    if budget is not None and written > budget.regex_positions:
        raise CompileBudgetExceeded(f"regex {pattern[:80]!r}: {written:,} positions, past the compile budget of "
                                    f"{budget.regex_positions:,}; split it or use fewer alternatives")
    if search:
        body = ("" if start else r"[\s\S]*") + f"(?:{body})" + ("" if end else r"[\s\S]*")
    import interegular
    try:
        fsm = interegular.parse_pattern(body).to_fsm()
    except Exception as e:  # interegular raises its own Unsupported / parse errors
        raise RegexUnsupported(f"regex {pattern!r} uses syntax the automaton builder cannot handle: {e}") from None
    return from_interegular(fsm)
