"""Field accuracy of extracted financial-report records against human gold values.

    from accuracy import load_gold, score, score_job, print_accuracy_table   # bench/ on sys.path
    python bench/accuracy.py DUMP.jsonl    # rescore a `bench/vs_llamacpp.py --dump` file with the rules below
    python bench/accuracy.py A.jsonl B.jsonl --ref "sglite standard, DRY default"   # + paired comparison

Gold values live in `examples/data/reports_gold.jsonl`, one object per report id with the seven fields that have
one objective answer (`GOLD_FIELDS`); `guidance` and `risks` are free text and are not scored. A gold value of
null means the report does not state it (r09 gives subscription growth only): that field is left out of the
score for that report, in the numerator and the denominator, so "accuracy" is always out of the gold fields
that exist. A missing or unparsed record gets every scored field wrong.

Matching rules (strict but fair; each is one function below):
- numbers (revenue, net_income, eps, revenue_growth_pct): equal within 0.5% relative or 0.005 absolute, so
  EPS 0.21 matches 0.214 but a sign error, a unit slip (cents for units, units for millions) or 43.4 for a stated
  43 does not. The value must be a JSON number (bool is not).
- currency: exact string equality (the schema already forces three capital letters).
- period: both sides parsed to (part, year), part one of Q1-Q4, H1, H2, FY; case, spaces and punctuation are
  ignored, the word "fiscal" or "FY" before the year is dropped inside a quarter or half ("Q3 FY2024" = "Q3 2024"
  = "2024 Q3" = "Q3-2024"), a bare year or "FY2024"/"fiscal 2024"/"2024年度"/"2024年全年" is FY, two-digit years
  are read as 20xx, and the Chinese forms 2024年第三季度 / 2024年三季度 / 2024年上半年 / 2024年半年度 are
  understood. Anything that does not parse must equal the gold string after the same clean-up. The part and the
  year must both match: a calendar "Q4 2024" for fiscal "Q2 FY2025" is wrong.
- company: Unicode NFKC, case-folded, a trailing parenthesis dropped ("Vantage Air Holdings (EUR)": the text's
  own annotation copied along), split into words (punctuation and spaces dropped), a leading "The" and trailing
  legal-form words (Inc, Incorporated, Corp, Corporation, Co, Company, Ltd, Limited, plc, LLC, ASA, AG, SA, NV)
  removed, then one Chinese legal-form ending (股份有限公司, 有限责任公司, 有限公司, 公司, or the short 股份)
  removed, on both sides; so "Northwind Robotics" = "Northwind Robotics, Inc." and "白鹭物流" = "白鹭物流股份有限公司". Words such as Group, Holdings, Bancorp or 集团 are part of the name and
  must be there; a translated name is wrong.
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from pathlib import Path
from typing import Any, Callable

from sglite.extract.evaluation import sign_test_p

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"
GOLD_PATH = DATA / "reports_gold.jsonl"
GOLD_FILES = {"bundled": "reports_gold.jsonl",                     # report set -> its gold file in DATA
              "synthetic": "synthetic_reports_gold.jsonl",        # (bench/synthetic_reports.py writes it)
              "formats": "format_reports_gold.jsonl"}             # tables, several periods, restated, 5 languages
NUMBER_FIELDS = ("revenue", "net_income", "eps", "revenue_growth_pct")
GOLD_FIELDS = ("company", "period", "currency") + NUMBER_FIELDS
REL_TOL, ABS_TOL = 0.005, 0.005

LEGAL_SUFFIXES = {"incorporated", "inc", "corporation", "corp", "company", "co", "limited", "ltd", "plc", "llc",
                  "asa", "ag", "sa", "nv"}                    # whole words at the end of a Latin-script name
CJK_LEGAL_SUFFIXES = ("股份有限公司", "有限责任公司", "有限公司", "公司", "股份")   # string endings
CN_NUMERALS = {"一": 1, "二": 2, "三": 3, "四": 4}


def load_gold(path: Path = GOLD_PATH) -> dict[str, dict]:
    """Gold records by report id (each holds GOLD_FIELDS, possibly null, and an optional free-text `note`)."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {row["id"]: row for row in rows}


# --- one rule per kind of field ----------------------------------------------------------------------------------
def number_matches(value: Any, gold: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return abs(value - gold) <= max(REL_TOL * abs(gold), ABS_TOL)


def normalize_company(name: str) -> str:
    name = unicodedata.normalize("NFKC", name).casefold()
    name = re.sub(r"\s*\([^()]*\)\s*$", "", name) or name   # "Kestrel Mining Limited (AUD)"
    words = re.findall(r"\w+", name)
    if len(words) > 1 and words[0] == "the":
        words = words[1:]
    while len(words) > 1 and words[-1] in LEGAL_SUFFIXES:   # "Co., Ltd.": strip repeatedly, never to nothing
        words.pop()
    s = "".join(words)
    for suffix in CJK_LEGAL_SUFFIXES:
        if s.endswith(suffix) and len(s) > len(suffix):
            return s[: -len(suffix)]
    return s


def company_matches(value: Any, gold: str) -> bool:
    return isinstance(value, str) and bool(value.strip()) and normalize_company(value) == normalize_company(gold)


def _year(text: str) -> int:
    return int(text) + 2000 if len(text) == 2 else int(text)


def parse_period(text: str) -> tuple[str, int] | str:
    """(part, year) with part in Q1-Q4, H1, H2, FY; or the cleaned-up string when it does not parse."""
    s = unicodedata.normalize("NFKC", text).upper()
    s = s.replace("FISCAL YEAR", "FY").replace("FISCAL", "FY")
    # Chinese: 2024年第三季度, 2024年三季度, 2024年上半年, 2024年半年度, 2024年度, 2024年全年, 2024年
    m = re.fullmatch(r"\s*(\d{4})\s*年\s*(.*?)\s*(报告)?\s*", s)
    if m:
        year, rest = int(m.group(1)), m.group(2)
        q = re.fullmatch(r"第?([一二三四1-4])季度?", rest)
        if q:
            n = CN_NUMERALS.get(q.group(1)) or int(q.group(1))
            return f"Q{n}", year
        if rest in ("上半年", "半年度", "中期", "上半年度"):
            return "H1", year
        if rest in ("下半年", "下半年度"):
            return "H2", year
        if rest in ("", "度", "年度", "全年"):
            return "FY", year
    s = re.sub(r"[^0-9A-Z]", "", s)
    patterns = (r"(?P<part>Q[1-4]|H[12])(?:FY)?(?P<year>\d{4}|\d{2})",   # Q3 2024, Q3 FY2024, H1 FY25
                r"(?:FY)?(?P<year>\d{4})(?P<part>Q[1-4]|H[12])",         # 2024 Q3, FY2025 H1
                r"(?P<part>[1-4])Q(?:FY)?(?P<year>\d{4}|\d{2})",          # 3Q 2024, 3Q24
                r"(?:FY)?(?P<year>\d{4})(?:FY)?",                         # FY2024, 2024, 2024 FY
                r"FY(?P<year>\d{2})")                                     # FY24
    for pattern in patterns:
        m = re.fullmatch(pattern, s)
        if m:
            part = m.groupdict().get("part") or "FY"
            return (f"Q{part}" if part.isdigit() else part), _year(m.group("year"))
    return s


def period_matches(value: Any, gold: str) -> bool:
    return isinstance(value, str) and bool(value.strip()) and parse_period(value) == parse_period(gold)


def currency_matches(value: Any, gold: str) -> bool:
    return value == gold


MATCHERS: dict[str, Callable[[Any, Any], bool]] = {
    "company": company_matches, "period": period_matches, "currency": currency_matches,
    **{name: number_matches for name in NUMBER_FIELDS}}


# --- scoring -----------------------------------------------------------------------------------------------------
def score(record: dict | None, gold: dict) -> dict[str, bool]:
    """Per gold field with a non-null value: does `record` get it right? `record` None (no output, or output that
    did not parse) scores every such field False. Fields absent from the dict are not scored."""
    record = record if isinstance(record, dict) else {}
    return {name: MATCHERS[name](record.get(name), gold[name])
            for name in GOLD_FIELDS if gold.get(name) is not None}


def score_job(records: dict[str, dict | None], gold: dict[str, dict]) -> dict[str, tuple[int, int]]:
    """(correct, scored) per field and under "total", over the ids in `records` (each must have a gold entry)."""
    missing = sorted(set(records) - set(gold))
    if missing:
        raise KeyError(f"no gold values for report id(s) {missing}; add them to {GOLD_PATH.name}")
    counts = {name: [0, 0] for name in (*GOLD_FIELDS, "total")}
    for doc_id, record in records.items():
        for name, ok in score(record, gold[doc_id]).items():
            for key in (name, "total"):
                counts[key][0] += ok
                counts[key][1] += 1
    return {name: (c, n) for name, (c, n) in counts.items()}


def paired(ref: dict[str, dict | None], other: dict[str, dict | None], gold: dict[str, dict]) -> tuple[int, int]:
    """(gold fields only `ref` got right, gold fields only `other` got right), over the ids `ref` holds; a
    missing id in `other` scores as no output. Fields both got right or both wrong say nothing of the difference."""
    only_ref = only_other = 0
    for doc_id in ref:
        a, b = score(ref[doc_id], gold[doc_id]), score(other.get(doc_id), gold[doc_id])
        only_ref += sum(a[k] and not b[k] for k in a)
        only_other += sum(b[k] and not a[k] for k in a)
    return only_ref, only_other


def print_accuracy_table(systems: dict[str, dict[str, tuple[int, int]]]) -> None:
    """One row per field, one column per system ({system name: score_job result}), as a markdown table."""
    names = list(systems)
    print("| field | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for field in (*GOLD_FIELDS, "total"):
        cells = []
        for name in names:
            c, n = systems[name][field]
            cells.append(f"{c}/{n} ({c / n:.0%})" if n else "–")
        label = f"**{field}**" if field == "total" else field
        print(f"| {label} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    """Rescore dump files (lines of {"system", "id", "record"} and optionally "set", as vs_llamacpp.py --dump and
    extraction_accuracy.py --dump write them); with --ref, each system's paired comparison against that one."""
    import argparse

    ap = argparse.ArgumentParser(description="rescore bench dump files against the gold values")
    ap.add_argument("dumps", type=Path, nargs="+")
    ap.add_argument("--ref", default=None, help="system name to compare every other system with, field by field")
    args = ap.parse_args(argv)
    by_set: dict[str, dict[str, dict[str, dict | None]]] = {}     # set -> system -> id -> record
    for dump in args.dumps:
        with open(dump, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                by_set.setdefault(row.get("set", "bundled"), {}).setdefault(row["system"], {})[row["id"]] = \
                    row["record"]
    golds = {name: load_gold(DATA / GOLD_FILES[name]) for name in by_set}
    for name, systems in by_set.items():
        print(f"\n### {name} ({GOLD_FILES[name]})\n")
        print_accuracy_table({system: score_job(records, golds[name]) for system, records in systems.items()})
    if args.ref:
        print(f"\npaired against {args.ref}: gold fields only it got right : only the other got right "
              f"(sign-test p)\n")
        names = list(by_set)
        print("| system | " + " | ".join(names) + " | all sets |")
        print("|---|" + "---:|" * (len(names) + 1))
        others = [s for s in dict.fromkeys(s for systems in by_set.values() for s in systems) if s != args.ref]
        for system in others:
            cells, tot = [], [0, 0]
            for name in names:
                if args.ref not in by_set[name] or system not in by_set[name]:
                    cells.append("–")
                    continue
                a, b = paired(by_set[name][args.ref], by_set[name][system], golds[name])
                tot = [tot[0] + a, tot[1] + b]
                cells.append(f"{a} : {b} (p {sign_test_p(a, b):.2f})")
            cells.append(f"{tot[0]} : {tot[1]} (p {sign_test_p(*tot):.2f})")
            print(f"| {system} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
