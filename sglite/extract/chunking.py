"""Long documents: split into chunks of at most N tokens that overlap by M, and the chunks' records merged.

The merge rule, field by field over the top-level fields, in chunk order:
- a scalar or object: the first non-null value found in its own chunk's text (a span not `not_found`; a number
  only with one of its field's name words just before it, see named_near), else the
  first non-null value; every different non-null value is a conflict, listed on the line under "conflicts"
  (`{"/field": [kept value, other values...]}`). A chunk that does not hold a field's answer still has to give
  one (the schema asks for it), and a small model invents it: preferring supported values keeps the chunk that
  states it;
- a list: the chunks' lists concatenated without duplicates (by JSON text), cut at the schema's `maxItems`;
- a field no chunk gives stays absent (or null, when every chunk gives null).
Spans are found afterwards in the whole document."""
from __future__ import annotations

import json
import re
from typing import Any, Callable

# a chunk ends at whitespace when some lies in its last CUT_SLACK of characters, so words are not cut
CUT_SLACK = 0.1


def chunk_bounds(text: str, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
                 chunk_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """Character (start, end) of each chunk: windows of `chunk_tokens` tokens stepping by chunk_tokens - overlap,
    mapped to characters by decoding token prefixes (or, where the tokenizer does not give the text back
    exactly, in proportion), each end moved back to whitespace when there is some near it."""
    if not 0 <= overlap < chunk_tokens:
        raise ValueError(f"the chunk overlap must be in [0, chunk tokens), got {overlap} of {chunk_tokens}")
    ids = encode(text)
    if len(ids) <= chunk_tokens:
        return [(0, len(text))]
    exact = decode(ids) == text

    def char_at(i: int) -> int:
        if i >= len(ids):
            return len(text)
        return len(decode(ids[:i])) if exact else round(len(text) * i / len(ids))

    bounds, step, i = [], chunk_tokens - overlap, 0
    while True:
        start = char_at(i) if not bounds else min(char_at(i), bounds[-1][1])
        end = char_at(i + chunk_tokens)
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            if cut > end - CUT_SLACK * (end - start):
                end = cut + 1
        bounds.append((start, end))
        if i + chunk_tokens >= len(ids):
            return bounds
        i += step


NAME_WINDOW = 60   # characters before a number's span that must name its field (see named_near)


def name_words(key: str, prop: Any) -> set[str]:
    """The words (3+ letters, lower case) of a field's key and title: "net_income" / "Net Income" -> net, income;
    a key of 2-3 letters (an abbreviation such as eps) counts whole."""
    text = " ".join([key.replace("_", " "), str(prop.get("title", "")) if isinstance(prop, dict) else ""])
    words = {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3}
    if len(key) <= 3:
        words.add(key.lower())
    return words


def named_near(text: str, start: int, words: set[str]) -> bool:
    """Whether the NAME_WINDOW characters before `start` hold one of `words` (as a word): a number that merely
    occurs in a chunk ("10 product launches") does not support a revenue of 10, "revenue reached 3,668.2" does."""
    before = set(re.findall(r"[a-z]+", text[max(0, start - NAME_WINDOW):start].lower()))
    return bool(before & words)


def merge_records(records: list[dict[str, Any]], schema: dict[str, Any],
                  supported: list[set[str]] | None = None) -> tuple[dict[str, Any], dict[str, list]]:
    """(merged record, conflicts) of the chunks' records, by the module's rule. `supported[k]`: the top-level
    fields of records[k] whose value was found in chunk k's text (None: take every value as supported)."""
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    if supported is not None:   # a leading record of the first supported scalar per field; lists skip it
        lead: dict[str, Any] = {}
        for record, found in zip(records, supported):
            for key, value in record.items():
                if value is not None and not isinstance(value, list) and key in found:
                    lead.setdefault(key, value)
        records = [lead, *records]
    merged: dict[str, Any] = {}
    conflicts: dict[str, list] = {}
    for n, record in enumerate(records):
        for key, value in record.items():
            if isinstance(value, list):
                if supported is not None and n == 0:
                    continue
                have = merged.get(key)
                have = list(have) if isinstance(have, list) else []
                seen = {json.dumps(v, sort_keys=True) for v in have}
                for item in value:
                    text = json.dumps(item, sort_keys=True)
                    if text not in seen:
                        seen.add(text)
                        have.append(item)
                limit = (props.get(key) or {}).get("maxItems") if isinstance(props.get(key), dict) else None
                merged[key] = have[:limit] if isinstance(limit, int) else have
            elif key not in merged or merged[key] is None:
                merged[key] = value
            elif value is not None and value != merged[key]:
                seen_values = conflicts.setdefault(f"/{key.replace('~', '~0').replace('/', '~1')}", [merged[key]])
                if value not in seen_values:
                    seen_values.append(value)
    return merged, conflicts
