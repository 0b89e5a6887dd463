"""Automata built from a source text (the document a value is extracted from): the copy constraints.

`substring_fsm(text)`: the non-empty substrings of `text`, as its suffix automaton over characters (at most
2 len(text) - 1 states, built in one pass); lowered like any string content (dfa_lowering.py), so a JSON string
under it writes a verbatim span of the text, in any tokenisation, with JSON's escapes where the text needs them.
`written_numbers(text)`: the numbers the text writes, as written (`1.12`, `318.4`, `-3`), the thousands
separators of `1,284.5` dropped, each a JSON number spelling."""
from __future__ import annotations

import re

from .charfsm import CharFSM, make_ranges

MAX_SOURCE_CHARS = 8_000     # a source text's characters (its automaton: ~2 states each, a dense byte table)
_NUMBER = re.compile(r"(?<![A-Za-z0-9.])(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(\.[0-9]+)?(?![0-9])")


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
    out: dict[str, None] = {}
    for m in _NUMBER.finditer(text):
        sign, whole, frac = m.group(1), m.group(2).replace(",", ""), m.group(3) or ""
        whole = whole.lstrip("0") or "0"
        out[sign + whole + frac] = None
    return list(out)
