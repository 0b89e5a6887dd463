"""Regex -> CharFSM (Python regex syntax, our own front end: regex_nfa.py), with the anchoring rules we need:
`compile_regex` matches the whole output; JSON Schema `pattern` searches anywhere unless anchored (^...$).

Classes: `compile_regex`, Lark and GBNF terminals read `\\d`, `\\w` and `\\s` as Python's `re` does (Unicode
classes; ASCII under the (?a) flag). A JSON Schema `pattern` (`search=True`) reads them as ECMA-262 does:
`\\d` and `\\w` ASCII, `\\s` the ASCII and Unicode spaces (unicode_classes.py)."""
from __future__ import annotations

import re

from ..budget import CompileBudgetExceeded, current, memo
from ..errors import GrammarError
from .charfsm import CharFSM, literal_trie
from .regex_nfa import RegexUnsupported, build_char_fsm, parse
from .regex_size import check_unrolled_size, literal_alternatives, positions

__all__ = ["RegexUnsupported", "regex_to_char_fsm"]

# the most positions a regex may have once its counted repetitions are unrolled, and the most states of its
# character automaton: past them the byte automaton costs more than a compile may spend (through
# GrammarCompiler, a{0,10000} takes 0.27 s and 70 MB on a quiet 2-core Xeon, 0.8 s busy; a{0,20000} 0.37 s and
# 154 MB quiet, 1.2 to 2.1 s busy; a{0,100000} 2.6 s and 640 MB).
# The budget's `regex_positions` bounds the size as written, which the subset construction grows with.
# compile_regex keeps its largest count of a character class as a counter instead (regex_counter.py): what is
# unrolled, and bounded here, is the rest.
MAX_REGEX_STATES = 10_000


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


def check_regex(pattern: str) -> None:
    """Raises GrammarError where `pattern` is not a regex, RegexUnsupported for \\p{..} classes."""
    if re.search(r"(?<!\\)(\\\\)*\\[pP]\{", pattern):
        raise RegexUnsupported(f"regex {pattern!r}: Unicode property classes (\\p{{..}}) are not supported")
    try:
        re.compile(pattern)
    except re.error as e:
        raise GrammarError(f"invalid regex {pattern!r}: {e}") from None


def regex_to_char_fsm(pattern: str, search: bool = False) -> CharFSM:
    """Compile `pattern` to a CharFSM. With `search`, unanchored ends match any text and the classes read as
    ECMA-262's (JSON Schema semantics). Counted repetitions are unrolled (see regex_counter.py for the one
    compile_regex keeps as a counter). Made once per compile (budget.memo); the automata built from it are
    cached by the compilers, under their budget."""
    return memo(("regex", pattern, search), lambda: _regex_to_char_fsm(pattern, search))


def _regex_to_char_fsm(pattern: str, search: bool) -> CharFSM:
    check_regex(pattern)
    body, start, end = _strip_anchors(pattern)
    try:
        tree = parse(body)               # the one parse: every check below and the builder read this tree
    except re.error as e:                # an anchor stripped off a pattern that needed it, say
        raise GrammarError(f"invalid regex {pattern!r}: {e}") from None
    if _has_bare(body, "^$"):
        raise RegexUnsupported(f"regex {pattern!r}: anchors are only supported at the very start and end")
    if search and (start or end) and _top_level_alternation(body):
        raise RegexUnsupported(f"regex {pattern!r}: anchors with top-level '|' are ambiguous; group the "
                               "alternatives, e.g. ^(a|b)$")
    if not search:
        return tree_to_char_fsm(tree, pattern)
    check_unrolled_size(pattern, MAX_REGEX_STATES, tree)
    _check_positions(tree, pattern)
    return build_char_fsm(pattern, tree, "ecma", not start, not end, MAX_REGEX_STATES)


def tree_to_char_fsm(tree, name: str) -> CharFSM:
    """The CharFSM of a parsed regex (re._parser's form: a pattern's parse, or a tree built in code, rx.py),
    read as Python reads it, matching whole texts. `name` names it in errors."""
    check_unrolled_size(name, MAX_REGEX_STATES, tree)
    words = literal_alternatives(name, tree=tree)
    if words is not None:                # keywords, enums: a trie, linear in their length
        return literal_trie({w: True for w in words})
    _check_positions(tree, name)
    return build_char_fsm(name, tree, "python", False, False, MAX_REGEX_STATES)


def _check_positions(tree, name: str) -> None:
    budget = current()
    written = positions(name, tree)
    if budget is not None and written > budget.regex_positions:
        raise CompileBudgetExceeded(f"regex {name[:80]!r}: {written:,} positions, past the compile budget of "
                                    f"{budget.regex_positions:,}; split it or use fewer alternatives")
