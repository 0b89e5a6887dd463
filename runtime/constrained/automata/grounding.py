"""Automata built from a source text (the document a value is extracted from): the copy constraints.

`substring_fsm(text)`: the non-empty substrings of `text`, as its suffix automaton over characters (at most
2 len(text) - 1 states, built in one pass); lowered like any string content (dfa_lowering.py), so a JSON string
under it writes a verbatim span of the text, in any tokenisation, with JSON's escapes where the text needs them.
`written_numbers(text)`: the numbers the text writes, as written (`1.12`, `318.4`, `-3`), the thousands
separators of `1,284.5` dropped, each a JSON number spelling. `read_numbers(text, units, negative_words)`: each
written number as the text reads it where it stands: times the factor of the unit word right after it
(`126.40亿` -> 12640 for a field in millions) and negative where its clause says so (`a net loss of $12.4
million` -> -12.4), so the model points at a number and the arithmetic is done here."""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Mapping, Sequence

from .charfsm import CharFSM, make_ranges

MAX_SOURCE_CHARS = 8_000     # a source text's characters (its automaton: ~2 states each, a dense byte table)
_NUMBER = re.compile(r"(?<![A-Za-z0-9.])(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(\.[0-9]+)?(?![0-9])")
# where a number's clause begins: the last of these before it (a sentence's full stop needs a space after it)
_CLAUSE_END = re.compile(r"[,;\n，；。、()（）]|\.\s")
# a minus written before a currency: `-$0.19`, `-EUR 3.1`, `−¥2`
_MINUS_BEFORE = re.compile(r"[-−]\s*(?:[A-Z]{0,3}\$|[£€¥￥]|[A-Z]{3}\s?)\s*$")


def substring_fsm(text: str) -> CharFSM:
    """CharFSM accepting exactly the non-empty substrings of `text`."""
    if not text:
        raise ValueError("the source text is empty")
    if len(text) > MAX_SOURCE_CHARS:
        raise ValueError(f"the source text has {len(text):,} characters, more than the {MAX_SOURCE_CHARS:,} a "
                         "span constraint takes; split the document (sglite extract --chunk-tokens 1500) or drop "
                         "x-sglite-span from this field")
    nxt: list[dict[int, int]] = [{}]
    link, length = [-1], [0]
    last = 0
    for ch in map(ord, text):
        cur = len(nxt)
        nxt.append({})
        link.append(-1)
        length.append(length[last] + 1)
        p = last
        while p != -1 and ch not in nxt[p]:
            nxt[p][ch] = cur
            p = link[p]
        if p == -1:
            link[cur] = 0
        else:
            q = nxt[p][ch]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(nxt)
                nxt.append(dict(nxt[q]))
                link.append(link[q])
                length.append(length[p] + 1)
                while p != -1 and nxt[p].get(ch) == q:
                    nxt[p][ch] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        last = cur
    trans = tuple(make_ranges([(c, c, t) for c, t in row.items()]) for row in nxt)
    return CharFSM(0, trans, {s: True for s in range(1, len(nxt))})    # every state but the empty start


def written_numbers(text: str) -> list[str]:
    """The numbers `text` writes, in order of first appearance, each once: digits with an optional fraction
    and the minus sign written right before them, thousands separators removed, as JSON number spellings (a
    leading zero only before the point: `05` is read as `5`)."""
    return list(dict.fromkeys(_spelling(m) for m in _NUMBER.finditer(text)))


def _spelling(m: re.Match) -> str:
    sign, whole, frac = m.group(1), m.group(2).replace(",", ""), m.group(3) or ""
    return sign + (whole.lstrip("0") or "0") + frac


def read_numbers(text: str, units: Mapping[str, float], negative_words: Sequence[str]) -> list[Decimal]:
    """Each number `text` writes read in place, in order of first appearance, each value once: its spelling
    (as `written_numbers`) times `units[word]` for the unit word that follows it (spaces between; a Latin word
    whole, case-insensitive, an `s` plural allowed; the longest that fits; none: 1), negated when its clause
    (the text between the `,;()`, line breaks or full stops around it, and their CJK forms) holds one of
    `negative_words` (Latin words whole, case-insensitive: `a net loss of 12.4`, `4% lower than`) or a minus
    stands before its currency (`-$0.19`). A written minus is kept, never doubled."""
    words = sorted(units, key=len, reverse=True)
    after = [re.compile(r"\s*" + re.escape(w) + (r"s?(?![A-Za-z])" if w.isascii() else ""), re.I)
             for w in words]
    neg = [re.compile((r"(?<![A-Za-z])" + re.escape(w) + r"(?![A-Za-z])") if w.isascii() else re.escape(w), re.I)
           for w in negative_words]
    out: dict[Decimal, None] = {}
    for m in _NUMBER.finditer(text):
        v = Decimal(_spelling(m))
        for w, rx in zip(words, after):
            if rx.match(text, m.end()):
                v *= Decimal(repr(units[w]) if isinstance(units[w], float) else units[w])
                break
        start = max((c.end() for c in _CLAUSE_END.finditer(text, 0, m.start())), default=0)
        end = _CLAUSE_END.search(text, m.end())
        before, clause = text[start:m.start()], text[start:end.start() if end else len(text)]
        if v > 0 and (_MINUS_BEFORE.search(before) or any(rx.search(clause) for rx in neg)):
            v = -v
        out[v] = None
    return list(out)
