"""Terms a document names, each in one canonical spelling, for fields whose value is a choice among them:
the reporting periods it writes (`third quarter of fiscal 2024` -> `Q3 2024`, `2024年半年度` -> `H1 2024`) and
the currencies it writes (`EUR`, `A$`, `港元` -> `HKD`). A program gives them to the model as the field's
`enum`, so the value is read from the text, not written from memory (the few-shot answer's `FY2024`).

Only explicit mentions count: a period needs its part (quarter, half, fiscal/full year) and its year together,
a bare year is not one; a `$` or a bare `元` counts (as USD, CNY) only where no more specific dollar or yuan
currency is named, `¥` as JPY in a text without Chinese (CNY in one) where neither is named."""
from __future__ import annotations

import re

_ORDINAL = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4,
            "premier": 1, "deuxième": 2, "troisième": 3, "quatrième": 4, "primer": 1, "segundo": 2, "tercer": 3,
            "cuarto": 4, "erstes": 1, "zweites": 2, "drittes": 3, "viertes": 4}
_CN = {"一": 1, "二": 2, "三": 3, "四": 4, "1": 1, "2": 2, "3": 3, "4": 4}
_Y = r"(?P<y>(?:19|20)\d\d)(?!\d)"
_FY = r"(?:fiscal(?:\s+year)?\s*|FY\s*)"
_ORD = r"(?P<o>first|second|third|fourth|1st|2nd|3rd|4th)"
# (regex, part): the part is Qn / Hn / FY, or taken from the named groups q (quarter digit), o (ordinal), h
_PERIODS = [(re.compile(p, re.I), part) for p, part in [
    (rf"\b{_FY}?{_Y}\s*,?\s*(?:Q(?P<q>[1-4])|{_ORD}[\s-]+quarter)\b", "Q"),        # fiscal 2025 Q2, 2024 Q3
    (rf"\b{_ORD}[\s-]+quarter(?:\s+(?:of|ended))?\s+{_FY}?{_Y}", "Q"),           # third quarter of fiscal 2024
    (rf"\bQ(?P<q>[1-4])\s*(?:of\s+)?{_FY}?{_Y}", "Q"),                               # Q3 2024, Q3 FY2024
    (rf"\b(?P<q>[1-4])Q\s*{_FY}?{_Y}", "Q"),                                          # 3Q 2024
    (r"\b(?P<q>[1-4])Q\s*(?:FY)?(?P<yy>\d\d)\b", "Q"),                                  # 3Q24
    (r"\bQ(?P<q>[1-4])\s*FY(?P<yy>\d\d)\b", "Q"),                                       # Q3 FY24
    (r"\bH(?P<h>[12])\s*FY(?P<yy>\d\d)\b", "H"),                                        # H1 FY25
    (rf"\bH(?P<h>[12])\s*{_FY}?{_Y}", "H"),                                          # H1 2024, H1 FY2025
    (rf"\b(?P<o>first|second)\s+half(?:\s+of)?(?:\s+the\s+year)?\s+{_FY}?{_Y}", "H"),  # first half of 2023
    (rf"\b(?P<o>premier|second|deuxième|troisième|quatrième|primer|segundo|tercer|cuarto|erstes|zweites|"
     rf"drittes|viertes)\s+(?:trimestre|Quartal)(?:\s+(?:de|del))?\s+{_Y}", "Q"),    # troisième trimestre 2024
    (rf"\b(?P<o>premier|second|primer|segundo|erstes|zweites)\s+(?:semestre|Halbjahr)(?:\s+(?:de|del))?"
     rf"\s+{_Y}", "H"),                                                                # premier semestre 2024
    (rf"\b(?:Geschäftsjahr|Gesch\.-?J\.|exercice|ejercicio|año fiscal)\s+{_Y}", "FY"),  # Geschäftsjahr 2024
    (rf"\b{_FY}{_Y}", "FY"),                                                        # FY2024, fiscal year 2024
    (r"\bFY(?P<yy>\d\d)\b", "FY"),                                                       # FY24
    (rf"\bfull[\s-]year\s+{_Y}", "FY"),                                              # full-year 2024
    # the year ended 31 December 2023 (not a half-year ended ...)
    (rf"(?<!half-)(?<!half )\byear\s+ended\s+(?:\d{{1,2}}\s+)?[A-Z][a-z]+\s+(?:\d{{1,2}},\s*)?{_Y}", "FY"),
    (r"(?P<y>(?:19|20)\d\d)\s*年度?\s*第\s*(?P<c>[一二三四1-4])\s*四半期", "Q"),            # 2024年度第2四半期
    (r"(?P<y>(?:19|20)\d\d)\s*年\s*(?:第\s*)?(?P<c>[一二三四1-4])\s*季度", "Q"),             # 2024年第三季度
    (r"(?P<y>(?:19|20)\d\d)\s*年\s*(?:上半年|半年度|中期)", "H1"),                          # 2024年半年度
    (r"(?P<y>(?:19|20)\d\d)\s*年\s*下半年", "H2"),
    (r"(?P<y>(?:19|20)\d\d)\s*(?:年\s*)?(?:年度|全年)", "FY"),                               # 2023年年度, 2024年度
]]


def document_periods(text: str) -> list[str]:
    """The periods `text` names, in order of first mention, each once: `Q1 2025`, `H1 2024`, `FY2023`. At each
    place the first form above that matches is taken, so `fiscal 2025 Q2` is Q2, not the fiscal year."""
    found: dict[tuple[int, str], str] = {}
    taken: list[tuple[int, int]] = []
    for rx, part in _PERIODS:
        for m in rx.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue              # inside a longer mention an earlier form read
            taken.append(m.span())
            g = m.groupdict()
            year = int(g["y"]) if g.get("y") else 2000 + int(g["yy"])
            if part == "Q":
                n = int(g["q"]) if g.get("q") else _ORDINAL[g["o"].lower()] if g.get("o") else _CN[g["c"]]
                name = f"Q{n} {year}"
            elif part == "H":
                n = int(g["h"]) if g.get("h") else _ORDINAL[g["o"].lower()]
                name = f"H{n} {year}"
            else:
                name = f"{part} {year}" if part != "FY" else f"FY{year}"
            found[(m.start(), name)] = name
    return list(dict.fromkeys(name for _, name in sorted(found)))


# ISO 4217 codes a report is likely to write (three capitals alone), and the other ways currencies are written
_ISO = set("USD EUR GBP JPY CNY HKD CAD AUD NZD CHF SEK NOK DKK SGD INR KRW BRL MXN ZAR RUB TRY PLN TWD THB IDR "
           "MYR PHP ILS AED SAR CZK HUF CLP COP PEN ARS VND EGP NGN KES PKR BDT QAR KWD".split())
_WRITTEN = [(re.compile(p), code) for p, code in [
    (r"\bUS\$|U\.S\. dollars?|US dollars?|美元", "USD"), (r"\bHK\$|Hong Kong dollars?|港元|港币|港幣", "HKD"),
    (r"\bCA?\$|Canadian dollars?|加元", "CAD"), (r"\bAU?\$|Australian dollars?|澳元", "AUD"),
    (r"\bNZ\$|New Zealand dollars?", "NZD"), (r"\bS\$|Singapore dollars?|新加坡元", "SGD"), (r"\bNT\$|新台币", "TWD"),
    (r"\bRMB\b|\brenminbi\b|\byuan\b|人民币", "CNY"), (r"€|\beuros?\b|欧元", "EUR"),
    (r"£|\bpounds? sterling\b|\bpence\b|英镑", "GBP"), (r"\byen\b|日元|円", "JPY"), (r"\bSwiss francs?|瑞士法郎", "CHF"),
    (r"₹|\brupees?\b", "INR"), (r"₩|韩元", "KRW"),
]]
_DOLLAR = {"USD", "HKD", "CAD", "AUD", "NZD", "SGD", "TWD"}
_YUAN = {"CNY", "HKD", "TWD", "USD", "EUR", "JPY", "GBP", "CAD", "AUD", "SGD", "KRW", "CHF"}   # "...元" forms


def document_currencies(text: str) -> list[str]:
    """The ISO codes of the currencies `text` names, in order of first mention, each once (module docstring)."""
    at: dict[str, int] = {}
    for m in re.finditer(r"(?<![A-Za-z])([A-Z]{3})(?![A-Za-z])", text):
        if m.group(1) in _ISO:
            at.setdefault(m.group(1), m.start())
    for rx, code in _WRITTEN:
        m = rx.search(text)
        if m:
            at[code] = min(at.get(code, m.start()), m.start())
    if not _DOLLAR & set(at):
        m = re.search(r"(?<![A-Za-z])\$", text)
        if m:
            at["USD"] = m.start()
    if not _YUAN & set(at):
        m = re.search(r"元", text)
        if m:
            at["CNY"] = m.start()
    m = re.search(r"[¥￥]", text)
    if m and not {"CNY", "JPY"} & set(at):
        at["CNY" if re.search(r"[\u4e00-\u9fff]", text) else "JPY"] = m.start()   # yen, or yuan in Chinese
    return sorted(at, key=at.get)
