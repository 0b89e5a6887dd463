"""Source spans: where in its document each scalar value of a record comes from.

    find_spans({"company": "Northwind", "revenue": 412.6}, text)
      -> {"/company": {"start": 0, "end": 9, "match": "exact"},
          "/revenue": {"start": 75, "end": 88, "match": "normalized"}}

Keys are JSON pointers (RFC 6901) into the record; `start`/`end` are character offsets into the text (Python
string indices, end exclusive). A value is tried in this order, and the first way that finds it wins:
- `exact`: the value's text occurs as is (a number as JSON writes it, or as an integer when it is one: 18.0 as
  "18"), not inside a longer number;
- `normalized`: strings ignoring case and runs of whitespace; numbers as any mention in the text reads: commas
  and spaces between digit groups ("12,500,000"), a scale word after it ("$12.5 million", "1.2bn", "300k") read
  in units, thousands, millions or billions, a percent sign, and a sign given by "-" or parentheses ("(3.2)"); a
  negative value also matches its magnitude, since a loss is usually written in words; an ISO currency code
  matches its symbol ("USD" and "$");
  a fiscal period ("Q3 FY2024", "H1 2024", "FY2023") matches its year beside a word for its part ("third quarter
  of fiscal 2024", "2024年第三季度", "first half", "full year");
- `fuzzy`: strings of at least 8 characters whose best-aligned window of the text scores >= FUZZY_CUTOFF
  (rapidfuzz's partial_ratio, case-folded) and holds every digit run of the value, widened to whole words;
  numbers a mention that rounds to the value at the value's own decimals (0.21 for "0.214");
- `not_found`: none of these; start and end are null. A value with no support in the text is the usual sign of
  an invented one.
null, booleans and empty or whitespace-only strings are not located (they have no text of their own) and get
no entry.

Cost: the text's number mentions are read once per document (one regex pass); each string is one `str.find`,
then one pass over a case-folded copy, then rapidfuzz (C++) only for what neither found."""
from __future__ import annotations

import math
import re
from typing import Any, Iterator

FUZZY_CUTOFF = 85.0
FUZZY_MIN_CHARS = 8
MATCHES = ("exact", "normalized", "fuzzy", "not_found")

# a number mention: sign or opening parenthesis, digits with optional thousands groups and decimals, an optional
# closing parenthesis, percent or scale word
_NUMBER = re.compile(r"(?P<open>\()?(?P<sign>[-−–])?\s?[$€£¥]?\s?"
                     r"(?P<digits>\d{1,3}(?:[,\u2009\u202f]\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
                     r"(?:\s?(?P<scale>(?:trillion|billion|million|thousand|bn|mn|tn|m|b|k)\b|亿|万))?"
                     r"(?P<close>\))?", re.IGNORECASE)
_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "b": 1e9,
           "trillion": 1e12, "tn": 1e12, "亿": 1e8, "万": 1e4}
_UNITS = (1.0, 1e3, 1e6, 1e9)   # a value may be given in units, thousands, millions or billions
CURRENCY_SYMBOLS = {"USD": ("$", "US$"), "EUR": ("€",), "GBP": ("£",), "JPY": ("¥", "円"),
                    "CNY": ("人民币", "RMB", "¥", "元"),
                    "HKD": ("HK$", "港币", "港元"), "CAD": ("C$",), "AUD": ("A$",), "INR": ("₹", "Rs"), "KRW": ("₩",)}


def find_spans(record: Any, text: str) -> dict[str, dict[str, Any]]:
    """{JSON pointer: {"start", "end", "match"}} for every string and number in `record` (nested objects and
    arrays included), located in `text`."""
    index = TextIndex(text)
    return {pointer: index.locate(value) for pointer, value in scalars(record)}


def scalars(value: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    """(JSON pointer, value) of every string and number under `value`, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from scalars(item, f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from scalars(item, f"{pointer}/{i}")
    elif (isinstance(value, str) and value.strip()) or (isinstance(value, (int, float))
                                                         and not isinstance(value, bool)):
        yield pointer, value


def span(start: int | None, end: int | None, match: str) -> dict[str, Any]:
    return {"start": start, "end": end, "match": match}


NOT_FOUND = span(None, None, "not_found")


class TextIndex:
    """One document, read lazily once for all of a record's values: its case-folded, whitespace-collapsed copy
    (with the offset of each of its characters in the original) and its number mentions."""

    def __init__(self, text: str):
        self.text = text
        self._folded: tuple[str, list[int]] | None = None
        self._numbers: list[tuple[int, int, float, float, int]] | None = None   # start, end, value, scale, decimals

    def locate(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            return self._locate_text(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return self._locate_number(value)
        return NOT_FOUND

    # --- strings ----------------------------------------------------------------------------------------------
    def _locate_text(self, value: str) -> dict[str, Any]:
        needle = value.strip()
        if not needle:
            return NOT_FOUND
        at = _find_word(self.text, needle)
        if at >= 0:
            return span(at, at + len(needle), "exact")
        folded, offsets = self.folded
        key = _fold(needle)
        at = _find_word(folded, key)
        if at >= 0:
            return span(offsets[at], offsets[at + len(key) - 1] + 1, "normalized")
        symbols = CURRENCY_SYMBOLS.get(needle.upper()) if len(needle) == 3 else None
        for symbol in symbols or ():
            at = _find_symbol(self.text, symbol, symbols)
            if at >= 0:
                return span(at, at + len(symbol), "normalized")
        period = _PERIOD.fullmatch(needle.upper())
        if period:
            found = self._locate_period(period.group("part") or period.group("part2") or "FY", period.group("year"))
            if found:
                return found
        if len(key) >= FUZZY_MIN_CHARS:
            from rapidfuzz import fuzz
            hit = fuzz.partial_ratio_alignment(key, folded, score_cutoff=FUZZY_CUTOFF)
            if hit is not None and hit.dest_end > hit.dest_start:
                window = folded[hit.dest_start:hit.dest_end]
                if all(d in window for d in re.findall(r"\d+", key)):
                    start, end = offsets[hit.dest_start], offsets[hit.dest_end - 1] + 1
                    while start > 0 and _word(self.text[start - 1]) and _word(self.text[start]):
                        start -= 1   # whole words: the window has the value's length, not the text's
                    while end < len(self.text) and _word(self.text[end]) and _word(self.text[end - 1]):
                        end += 1
                    return span(start, end, "fuzzy")
        return NOT_FOUND

    def _locate_period(self, part: str, year: str) -> dict[str, Any] | None:
        """The closest pair (within PERIOD_GAP characters) of the year and a word for the part."""
        years = [m.span() for m in re.finditer(rf"(?<!\d){year}(?!\d)", self.text)]
        words = [m.span() for m in re.finditer(PERIOD_WORDS[part], self.text, re.IGNORECASE)]
        pairs = [(max(w[0], y[0]) - min(w[1], y[1]), min(w[0], y[0]), max(w[1], y[1])) for w in words for y in years]
        gap, start, end = min(pairs, default=(PERIOD_GAP + 1, 0, 0))
        return span(start, end, "normalized") if gap <= PERIOD_GAP else None

    @property
    def folded(self) -> tuple[str, list[int]]:
        """The text case-folded with each whitespace run as one space, and the original offset of each char."""
        if self._folded is None:
            chars, offsets = [], []
            for m in re.finditer(r"\s+|\S+", self.text):
                if m.group().isspace():
                    chars.append(" ")
                    offsets.append(m.start())
                    continue
                for i, ch in enumerate(m.group()):
                    low = ch.casefold()
                    chars.append(low)
                    offsets.extend([m.start() + i] * len(low))
            self._folded = ("".join(chars), offsets)
        return self._folded

    # --- numbers ----------------------------------------------------------------------------------------------
    def _locate_number(self, value: float) -> dict[str, Any]:
        for token in _number_texts(value):
            for m in re.finditer(re.escape(token), self.text):
                before = self.text[m.start() - 1] if m.start() else ""
                after = self.text[m.end():m.end() + 2]
                if not (before.isdigit() or before == "." or after[:1].isdigit()
                        or (after[:1] in ".," and after[1:2].isdigit())):
                    return span(m.start(), m.end(), "exact")
        target = abs(value)
        signs = (value,) if value >= 0 else (value, target)
        rounded = None
        for start, end, number, scale, decimals in self.numbers:
            for unit in _UNITS:
                read = number * scale / unit
                if any(_close(read, v) for v in signs):
                    return span(start, end, "normalized")
                if rounded is None and any(_close(_round_to(read, v), v) for v in signs if _decimals(v) < decimals):
                    rounded = span(start, end, "fuzzy")
        return rounded or NOT_FOUND

    @property
    def numbers(self) -> list[tuple[int, int, float, float, int]]:
        if self._numbers is None:
            self._numbers = []
            for m in _NUMBER.finditer(self.text):
                digits = re.sub(r"[,\u2009\u202f]", "", m.group("digits"))
                number = float(digits)
                negative = bool(m.group("sign")) or bool(m.group("open") and m.group("close"))
                scale = _SCALES.get((m.group("scale") or "").lower(), 1.0)
                decimals = len(digits.partition(".")[2])
                start = m.start("sign") if m.group("sign") else m.start("digits")
                end = m.end("scale") if m.group("scale") else m.end("digits")
                if m.group("open") and m.group("close"):
                    start, end = m.start(), m.end()
                self._numbers.append((start, end, -number if negative else number, scale, decimals))
        return self._numbers


_PERIOD = re.compile(r"(?:(?P<part>Q[1-4]|H[12])\s*-?\s*)?(?:FY|FISCAL\s*)?\s*(?P<year>\d{4})"
                     r"(?:\s*(?P<part2>Q[1-4]|H[12]))?")
_ORDINALS = {"1": ("first", "1st", "一"), "2": ("second", "2nd", "二"), "3": ("third", "3rd", "三"),
             "4": ("fourth", "4th", "四")}
PERIOD_WORDS = {
    **{f"Q{n}": rf"\bQ{n}\b|\b{n}Q|(?:{'|'.join(_ORDINALS[n][:2])})[- ]quarter|第?{_ORDINALS[n][2]}季度"
       for n in "1234"},
    "H1": r"\bH1\b|first[- ]half|half[- ]year|interim|上半年|半年度|中期",
    "H2": r"\bH2\b|second[- ]half|下半年",
    "FY": r"\bFY|fiscal|full[- ]year|financial year|\byear\b|年度|全年"}
PERIOD_GAP = 40   # characters between the part's word and the year


def _find_word(haystack: str, needle: str) -> int:
    """The first occurrence of `needle` that does not cut an ASCII word ("EUR" is not in "European"); -1."""
    at = haystack.find(needle)
    while at >= 0:
        before = haystack[at - 1] if at else " "
        after = haystack[at + len(needle)] if at + len(needle) < len(haystack) else " "
        if not (_word(needle[0]) and _word(before)) and not (_word(needle[-1]) and _word(after)):
            return at
        at = haystack.find(needle, at + 1)
    return -1


def _find_symbol(text: str, symbol: str, own: tuple[str, ...]) -> int:
    """The first occurrence of a currency symbol that is not the tail of another currency's ("$" in "A$" is the
    Australian dollar, not USD's; "$" in "US$" is USD's own); -1."""
    at = text.find(symbol)
    while at >= 0:
        lead = at
        while lead > 0 and text[lead - 1].isascii() and text[lead - 1].isalpha():
            lead -= 1
        if lead == at or text[lead:at + len(symbol)] in own:
            return at
        at = text.find(symbol, at + 1)
    return -1


def _word(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _number_texts(value: float) -> list[str]:
    """How JSON and people write `value` as is: 412.6; 18.0 also as 18."""
    texts = [repr(value) if isinstance(value, float) else str(value)]
    if isinstance(value, float) and value.is_integer():
        texts.append(str(int(value)))
    return texts


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _decimals(value: float) -> int:
    text = repr(float(value))
    return 0 if "e" in text else len(text.partition(".")[2].rstrip("0"))


def _round_to(read: float, value: float) -> float:
    return round(read, _decimals(value))


def span_text(text: str, where: dict[str, Any]) -> str | None:
    """The text a span covers (None for not_found)."""
    return None if where.get("start") is None else text[where["start"]:where["end"]]


def not_found_fields(spans: dict[str, dict[str, Any]]) -> list[str]:
    """The top-level fields with a value not found, each once, in order (`/risks/1` counts as `risks`)."""
    fields = (p.split("/")[1].replace("~1", "/").replace("~0", "~") for p, s in spans.items()
              if s["match"] == "not_found" and p)
    return list(dict.fromkeys(fields))
