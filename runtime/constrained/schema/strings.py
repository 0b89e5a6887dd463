"""Lowering of `type: string`: pattern (search semantics; more than one after allOf merges, `$patterns`), patterns
that must not match (`$notPattern`, from `not`), format, excluded values (from `not`) and
minLength/maxLength, to one lexeme DFA over the JSON string text."""
from __future__ import annotations

import json
from typing import Optional

from ..automata.charfsm import ANY_CHAR, CharFSM, literal_trie, with_length
from ..automata.complement import complement_fsm
from ..automata.dfa_lowering import lower_char_fsm
from ..automata.formats import FORMAT_MAX_LENGTH, FORMATS, format_fsm
from ..automata.grounding import substring_fsm
from ..automata.intersect import intersect
from ..automata.key_dfa import words_dfa
from ..automata.regex import RegexUnsupported, regex_to_char_fsm
from ..automata.span_dfa import span_dfa
from ..errors import GrammarError, UnsupportedSchemaError
from ..ir.nodes import LexNode
from .keywords import SPAN, STANDARD_FORMATS, source_text
from .lowerer import Lowerer

MAX_LENGTH_STATES = 4000     # pattern x character-counter product states before length bounds are refused
# what _content_fsm reads besides the span: without them (and minLength) a span is built straight from its text
_CONTENT_KEYWORDS = frozenset({"pattern", "$patterns", "$notPattern", "format", "$exclude"})


def lower_string(sc: Lowerer, s: dict, ptr: str) -> int:
    min_len = s.get("minLength", 0)
    max_len = s.get("maxLength")
    patterns = ([s["pattern"]] if "pattern" in s else []) + list(s.get("$patterns", []))
    span = source_text(s, SPAN, ptr)
    if span is not None and min_len == 0 and not _CONTENT_KEYWORDS & set(s):
        # a span alone (maxLength counted by the node): built straight from the text
        try:
            d = sc.dfa(("span", span), lambda: span_dfa(span, sc.canonical))
        except ValueError as e:
            raise _span_error(ptr, e) from None
        return sc.add(LexNode(d, 0, max_len, source=f"string span of {len(span)} chars"))
    fsm = _content_fsm(s, ptr)
    if "format" in s and s["format"] in FORMAT_MAX_LENGTH and min_len == 0:
        # the exact counted path below, no product automaton
        cap = FORMAT_MAX_LENGTH[s["format"]]
        max_len = min(max_len, cap) if max_len is not None else cap
    excluded = tuple(sorted({v for v in s.get("$exclude", []) if isinstance(v, str)}))
    text = " ".join(["string"] + [f"/{p}/" for p in patterns] + [f"not /{p}/" for p in s.get("$notPattern", [])] +
                    ([f"format={s['format']}"] if "format" in s and s["format"] in FORMATS else []) +
                    ([f"span of {len(span)} chars"] if span is not None else []) +
                    ([f"not {', '.join(map(json.dumps, excluded))}"] if excluded else []))
    if excluded:
        if fsm is None:
            d = sc.dfa(("notwords", excluded), lambda: words_dfa({}, True, excluded, sc.canonical))
            return sc.add(LexNode(d, min_len, max_len, source=text))
        fsm = intersect(fsm, literal_trie({}, True, excluded))
    if fsm is None:
        return sc.plain_string(min_len, max_len)
    if min_len == 0 and max_len is not None:
        # exact without a product automaton: with no lower bound, a state is live iff its shortest
        # completion fits in what maxLength leaves (LexNode counts characters, char_dist checks the rest)
        key = ("strfsm", tuple(patterns), tuple(s.get("$notPattern", ())), s.get("format"), excluded, span)
        d = sc.dfa(key, lambda: lower_char_fsm(fsm, True, sc.canonical))
        return sc.add(LexNode(d, 0, max_len, source=text))
    if min_len or max_len is not None:
        try:
            fsm = with_length(fsm, min_len, max_len, MAX_LENGTH_STATES)
        except OverflowError:
            raise UnsupportedSchemaError("maxLength" if max_len is not None else "minLength", ptr,
                                         "length bounds together with a pattern/format are too large") from None
    key = ("strfsm", tuple(patterns), tuple(s.get("$notPattern", ())), s.get("format"), excluded, span, min_len,
           max_len)
    try:
        d = sc.dfa(key, lambda: lower_char_fsm(fsm, True, sc.canonical))
    except OverflowError as e:
        raise GrammarError(f"string at {ptr}: {e}") from None
    if min_len or max_len is not None:        # the bounds are in the DFA, not counted by the node
        text += f" ({min_len}..{'' if max_len is None else max_len} chars)"
    return sc.add(LexNode(d, source=text))


def _content_fsm(s: dict, ptr: str) -> Optional[CharFSM]:
    """The characters a string under `s` may hold, by pattern(s), patterns that must not match, and format
    (None: any); lengths and excluded values are left to the caller."""
    fsm = None
    patterns = ([s["pattern"]] if "pattern" in s else []) + list(s.get("$patterns", []))
    for p, must in [(p, True) for p in patterns] + [(p, False) for p in s.get("$notPattern", [])]:
        try:
            f = regex_to_char_fsm(p, True)
        except RegexUnsupported as e:
            raise UnsupportedSchemaError("pattern" if must else "not", ptr, str(e)) from None
        f = f if must else complement_fsm(f)
        fsm = f if fsm is None else intersect(fsm, f)
    if "format" in s:
        # the spec lets a validator treat formats it does not know as annotations; we refuse them instead, so a
        # `format` is never silently not enforced (it constrains strings only: `int32` on an integer is moot)
        f = s["format"]
        if f not in FORMATS:
            what = "is not enforced" if f in STANDARD_FORMATS else "is not a format we know"
            raise UnsupportedSchemaError("format", ptr, f"format {f!r} {what} (supported: "
                                         f"{', '.join(sorted(FORMATS))})")
        ffsm = format_fsm(f)
        fsm = ffsm if fsm is None else intersect(fsm, ffsm)
    span = source_text(s, SPAN, ptr)
    if span is not None:
        # a verbatim span of the source: its substrings (a suffix automaton), under every other constraint
        try:
            sfsm = substring_fsm(span)
        except ValueError as e:
            raise _span_error(ptr, e) from None
        fsm = sfsm if fsm is None else intersect(fsm, sfsm)
    return fsm


def _span_error(ptr: str, e: ValueError) -> GrammarError:
    """The error of a source the span automaton refuses (empty, too long), naming the field, with the way out."""
    return GrammarError(f"{SPAN} at {ptr}: {e}; split the document (sglite extract --chunk-tokens 1500) or drop "
                        "x-sglite-span from this field")


def string_fsm(s: dict, ptr: str) -> Optional[CharFSM]:
    """Every constraint of `s` on a string's characters (patterns, format, excluded values, length) as one
    character automaton; None when `s` allows any string. For names (`propertyNames`)."""
    fsm = _content_fsm(s, ptr)
    excluded = tuple(sorted({v for v in s.get("$exclude", []) if isinstance(v, str)}))
    if excluded:
        trie = literal_trie({}, True, excluded)
        fsm = trie if fsm is None else intersect(fsm, trie)
    min_len, max_len = s.get("minLength", 0), s.get("maxLength")
    if min_len or max_len is not None:
        if fsm is None:
            fsm = CharFSM(0, (tuple((a, b, 0) for a, b in ANY_CHAR),), {0: True})
        try:
            fsm = with_length(fsm, min_len, max_len, MAX_LENGTH_STATES)
        except OverflowError:
            raise UnsupportedSchemaError("maxLength" if max_len is not None else "minLength", ptr,
                                         "length bounds together with a pattern/format are too large") from None
    return fsm
