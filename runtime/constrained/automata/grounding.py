"""Automata built from a source text (the document a value is extracted from): the copy constraints.

`substring_fsm(text)`: the non-empty substrings of `text`, as its suffix automaton over characters (at most
2 len(text) - 1 states, built in one pass); lowered like any string content (dfa_lowering.py), so a JSON string
under it writes a verbatim span of the text, in any tokenisation, with JSON's escapes where the text needs them.
`written_numbers(text)`: the numbers the text writes, as written (`1.12`, `318.4`, `-3`), the thousands
separators of `1,284.5` dropped, each a JSON number spelling (a text with decimal commas, `4,8 Mrd.`, read
so). `read_numbers(text, units, negative_words)`: each written figure as the text reads it where it stands:
times the factor of the unit word right after it (`126.40亿` -> 12640 for a field in millions) and negative
where its clause says so (`a net loss of $12.4 million` -> -12.4), so the model points at a number and the
arithmetic is done here."""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Mapping, Sequence

from .charfsm import CharFSM, make_ranges
from .span_dfa import suffix_automaton

# a source text's characters: its automaton has ~1.6 states per character, each a dense byte table row
# (1 KiB, about five times over in the mask caches); composed with a pattern, format or minLength the span goes
# through the general character automata, which take the smaller texts
MAX_SOURCE_CHARS = 8_000      # (a span alone is built by span_dfa.py, up to its MAX_SPAN_CHARS)
_NUMBER = re.compile(r"(?<![A-Za-z0-9.])(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(\.[0-9]+)?(?![0-9])")
# the same with a decimal comma, thousands by `.` or a (thin, no-break) space: `4,8 Mrd.`, `5.640`, `1 284,5`
_NUMBER_COMMA = re.compile(r"(?<![A-Za-z0-9.,])(-?)([0-9]{1,3}(?:[. \u00a0\u202f][0-9]{3})+|[0-9]+)(,[0-9]+)?"
                           r"(?![0-9])")
# a text writes decimal commas when it has `d,d` or `d,dd` and no `d.d` / `d.dd` (`1,284.5` has neither)
_COMMA_DECIMAL = re.compile(r"(?<![0-9,.])[0-9]{1,3},[0-9]{1,2}(?![0-9])")
_POINT_DECIMAL = re.compile(r"[0-9]\.[0-9]{1,2}(?![0-9])")
# where a number's clause begins: the last of these before it (a sentence's full stop needs a space after it;
# a comma between digits is the number's own)
_CLAUSE_END = re.compile(r"[;\n，；。、()（）]|,(?![0-9])|\.\s")
_CURRENCY = r"(?:[A-Z]{0,3}\$|[£€¥￥]|[A-Z]{3}\s?)"      # written before an amount: `$`, `A$`, `€`, `EUR `
# a number in brackets by itself, the accountants' minus: `(41.7)`, `($0.28)`
_BRACKETED = (re.compile(r"\(\s*" + _CURRENCY + r"?\s*$"), re.compile(r"\s*\)"))
# a minus written before a currency: `-$0.19`, `-EUR 3.1`, `−¥2`
_MINUS_BEFORE = re.compile(r"[-−]\s*" + _CURRENCY + r"\s*$")


def substring_fsm(text: str) -> CharFSM:
    """CharFSM accepting exactly the non-empty substrings of `text`."""
    if not text:
        raise ValueError("the source text is empty")
    if len(text) > MAX_SOURCE_CHARS:
        raise ValueError(f"the source text has {len(text):,} characters, more than the {MAX_SOURCE_CHARS:,} a "
                         "span under a pattern, format or minLength takes")
    nxt = suffix_automaton(text)
    trans = tuple(make_ranges([(c, c, t) for c, t in row.items()]) for row in nxt)
    return CharFSM(0, trans, {s: True for s in range(1, len(nxt))})    # every state but the empty start


def written_numbers(text: str) -> list[str]:
    """The numbers `text` writes, in order of first appearance, each once: digits with an optional fraction
    and the minus sign written right before them, thousands separators removed, as JSON number spellings (a
    leading zero only before the point: `05` is read as `5`)."""
    return list(dict.fromkeys(spelled for _, spelled in _numbers(text)))


def exact_decimal(k: float) -> Decimal:
    """`k` (an int or float factor from a schema) as the Decimal it is written as: 0.01 -> Decimal("0.01")."""
    return Decimal(repr(k) if isinstance(k, float) else k)


def _numbers(text: str):
    """(match, JSON spelling) of each number `text` writes: a text that writes decimal commas (`4,8`, and no
    `4.8`) is read that way throughout, its `.` and spaces between digit groups thousands separators."""
    comma = _COMMA_DECIMAL.search(text) and not _POINT_DECIMAL.search(text)
    for m in (_NUMBER_COMMA if comma else _NUMBER).finditer(text):
        sign, whole, frac = m.group(1), re.sub(r"[^0-9]", "", m.group(2)), (m.group(3) or "").replace(",", ".")
        yield m, sign + (whole.lstrip("0") or "0") + frac


_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_DAY_AFTER_MONTH = re.compile(_MONTH + r"\s+$")
_MONTH_AFTER_DAY = re.compile(r"\s+" + _MONTH + r"(?![a-z])")
_CJK_DATE = re.compile(r"\s*[年月日号]")


def _date_part(text: str, m: re.Match, spelled: str) -> bool:
    """Whether the number `m` (spelled `spelled`) is a year, a day of a month, or a CJK date's part."""
    if not spelled.isdigit():
        return False
    if _CJK_DATE.match(text, m.end()):
        return True
    if len(m.group(0)) == 4 and 1900 <= int(spelled) <= 2099:
        return True
    return int(spelled) <= 31 and bool(_DAY_AFTER_MONTH.search(text, max(0, m.start() - 12), m.start())
                                       or _MONTH_AFTER_DAY.match(text, m.end()))


def read_numbers(text: str, units: Mapping[str, float], negative_words: Sequence[str],
                 unit_required: bool = False) -> list[Decimal]:
    """Each figure `text` writes read in place, in order of first appearance, each value once: its spelling
    (as `written_numbers`) times `units[word]` for the unit word that follows it (spaces between; a Latin word
    whole, case-insensitive, an `s` plural allowed; the longest that fits; none: 1, or with `unit_required` not a
    figure), negated when its clause (the text between the `,;()`, line breaks or full stops around it, and
    their CJK forms) holds one of `negative_words` (Latin words whole, case-insensitive: `a net loss of 12.4`,
    `4% lower than`), a minus stands before its currency (`-$0.19`) or, where negative words are given, it
    stands in brackets by itself (`(41.7)`). A written minus is kept, never doubled. Parts of dates are not
    figures: a year (1900-2099 written bare, no unit after it), a day beside a month's name (`June 30`, `31
    December`), a number before 年/月/日."""
    words = sorted(units, key=len, reverse=True)
    after = [re.compile(r"\s*" + re.escape(w) + (r"s?(?![A-Za-z])" if w.isascii() else ""), re.I)
             for w in words]
    neg = [re.compile((r"(?<![A-Za-z])" + re.escape(w) + r"(?![A-Za-z])") if w.isascii() else re.escape(w), re.I)
           for w in negative_words]
    out: dict[Decimal, None] = {}
    for m, spelled in _numbers(text):
        v = Decimal(spelled)
        factor = next((units[w] for w, rx in zip(words, after) if rx.match(text, m.end())), None)
        if factor is None and (unit_required or _date_part(text, m, spelled)):
            continue
        if factor is not None:
            v *= exact_decimal(factor)
        start = max((c.end() for c in _CLAUSE_END.finditer(text, 0, m.start())), default=0)
        end = _CLAUSE_END.search(text, m.end())
        before, clause = text[start:m.start()], text[start:end.start() if end else len(text)]
        bracketed = (neg and _BRACKETED[0].search(text, max(0, m.start() - 8), m.start())
                     and _BRACKETED[1].match(text, m.end()))
        if v > 0 and (_MINUS_BEFORE.search(before) or bracketed or any(rx.search(clause) for rx in neg)):
            v = -v
        out[v] = None
    return list(out)
