"""Synthetic financial-report excerpts with gold values known by construction: a larger accuracy set for the main
job than the 20 hand-written reports (whether a generation default costs gold fields: 139 fields cannot tell a
2-field loss from run-to-run noise).

    python bench/synthetic_reports.py            # writes examples/data/synthetic_reports{,_gold}.jsonl
    python bench/synthetic_reports.py --count 120 --seed 1 --out-dir /tmp
    python bench/synthetic_reports.py --long 20000 --out-dir /tmp   # one long report: long_report{,_gold}.jsonl

Each report draws a company, a currency, a period, revenue, net income (profit or loss), EPS and growth, then
writes them with one of several English or Chinese layouts: amounts in millions or billions (亿元 in Chinese),
with or without thousands separators, EPS in currency units or in pence/cents beside the unit value, growth as
"up 8%", "+8%", "a decline of 3.5%", quarters as "Q3 2024", "third quarter of 2024", "3Q24", "fiscal 2025
second quarter", half years and fiscal years in several spellings, plus distractors (prior-year figures, guidance
ranges, other metrics). The gold line holds exactly what was drawn, in the units bench/accuracy.py scores
(millions of the currency, currency units per share, percent), so the data is reproducible from the seed."""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent.parent / "examples" / "data"

EN_FIRST = ["Amber", "Blackstone", "Cobalt", "Driftwood", "Ember", "Falcon", "Granite", "Harbor", "Ironwood",
            "Juniper", "Kingfisher", "Lumen", "Maple", "Nimbus", "Orchid", "Pioneer", "Quarry", "Redwood",
            "Sable", "Thistle", "Umbra", "Verdant", "Willow", "Xenon", "Yarrow", "Zephyr", "Alder", "Brightwater",
            "Copperfield", "Dunmore", "Eastgate", "Foxglove", "Glenrock", "Highmark", "Islay", "Larkspur"]
EN_SECOND = ["Robotics", "Pharmaceuticals", "Logistics", "Foods", "Semiconductors", "Energy", "Retail",
             "Software", "Mining", "Airlines", "Insurance", "Telecom", "Biosciences", "Materials", "Hotels",
             "Shipping", "Analytics", "Motors", "Brewing", "Payments", "Textiles", "Chemicals", "Media", "Water"]
EN_SUFFIX = ["Inc.", "Corp.", "plc", "Ltd.", "AG", "SA", "NV", "ASA", "Group", "Holdings", "Limited", "LLC",
             "Corporation", "Bancorp", "", "Group plc", "Holdings Inc."]
ZH_FIRST = ["华辰", "远山", "星河", "金桥", "青松", "海澜", "东方", "瑞丰", "中天", "宏远", "博雅", "嘉禾", "恒信",
            "天翼", "明珠", "汇通", "新纪元", "安泰", "长城", "银河", "鼎盛", "富春", "凯旋", "云帆"]
ZH_SECOND = ["新能源", "食品", "云计算科技", "银行", "医药", "汽车零部件", "文旅发展", "半导体材料", "物流",
             "化工", "电子", "建材", "传媒", "环保科技", "家居", "航空"]
ZH_SUFFIX = ["股份有限公司", "集团", "有限公司", "集团股份有限公司", "科技股份有限公司"]

# code, English symbol forms (symbol-prefix or code-prefix), minor unit name (None: none used in text)
CURRENCIES = [("USD", ["$", "US$", "USD "], "cents"), ("EUR", ["EUR ", "€"], "cents"),
              ("GBP", ["GBP ", "£"], "pence"), ("CAD", ["CAD ", "C$"], "cents"), ("AUD", ["AUD ", "A$"], "cents"),
              ("CHF", ["CHF "], None), ("SEK", ["SEK "], None), ("NOK", ["NOK "], None),
              ("JPY", ["JPY ", "¥"], None), ("HKD", ["HKD ", "HK$"], "cents"), ("CNY", ["RMB ", "CNY "], None)]
ZH_CURRENCIES = [("CNY", ["", "人民币"]), ("HKD", ["港币", "港元"])]

QUARTER_WORDS = {1: "first", 2: "second", 3: "third", 4: "fourth"}
QUARTER_END = {1: "March 31", 2: "June 30", 3: "September 30", 4: "December 31"}
ZH_QUARTER = {1: "第一季度", 2: "第二季度", 3: "第三季度", 4: "第四季度"}

GUIDANCE = ["expects revenue growth of {a}-{b}% next year", "reaffirmed its full-year outlook",
            "plans to open {n} new sites next year", "expects margins to improve in the second half",
            "targets positive free cash flow next year", "guided to flat volumes for the coming quarter",
            "raised its dividend by {a}%", "will cut capital expenditure by {a}%"]
RISKS = ["currency volatility", "supplier concentration", "regulatory changes", "higher interest rates",
         "labour shortages", "cyber attacks", "weaker consumer demand", "commodity price swings",
         "customer concentration", "litigation outcomes", "energy costs", "trade tariffs", "patent expiries",
         "credit losses", "weather disruptions", "competition from low-cost rivals"]
ZH_RISKS = ["原材料价格波动", "汇率波动", "行业竞争加剧", "政策变化", "下游需求不及预期", "核心人员流失",
            "应收账款回收风险", "环保合规风险", "海外市场不确定性"]


def _amount_en(rng: random.Random, value_m: float, sym: str) -> tuple[str, float]:
    """`value_m` (millions, >= 0) as report text ('$1.92 billion', 'EUR 1,284.0 million', '$412.6 million') and
    the value that text states, in millions (the gold value)."""
    if value_m >= 1000 and rng.random() < 0.5:
        billions = round(value_m / 1000, 2)
        return f"{sym}{billions:.2f}".rstrip("0").rstrip(".") + " billion", round(billions * 1000, 1)
    value_m = round(value_m, 1)
    text = f"{value_m:,.1f}" if rng.random() < 0.6 else f"{value_m:.1f}"
    if rng.random() < 0.3 and value_m == int(value_m):
        text = f"{int(value_m):,}"
    return f"{sym}{text} million", value_m


def _period_en(rng: random.Random) -> tuple[str, str]:
    """(gold period, phrase as the report writes it)."""
    year = rng.choice([2023, 2024, 2025])
    kind = rng.choices(["Q", "H", "FY"], [0.55, 0.15, 0.30])[0]
    if kind == "Q":
        q = rng.randint(1, 4)
        phrase = rng.choice([f"Q{q} {year}", f"the {QUARTER_WORDS[q]} quarter of {year}",
                             f"{q}Q{year % 100}", f"the quarter ended {QUARTER_END[q]}, {year} (Q{q} {year})",
                             f"{QUARTER_WORDS[q]}-quarter {year}", f"fiscal {year} Q{q}"])
        return (f"Q{q} FY{year}" if phrase.startswith("fiscal") else f"Q{q} {year}"), phrase
    if kind == "H":
        h = rng.choice([1, 2])
        phrase = rng.choice([f"H{h} {year}", f"the {'first' if h == 1 else 'second'} half of {year}",
                             f"the six months ended {'June 30' if h == 1 else 'December 31'}, {year} (H{h} {year})"])
        return f"H{h} {year}", phrase
    phrase = rng.choice([f"fiscal year {year}", f"FY{year}", f"the full year {year}", f"fiscal {year}",
                         f"the year ended 31 December {year} (FY{year})"])
    return f"FY{year}", phrase


def _growth_en(rng: random.Random, g: float) -> str:
    s = f"{abs(g):.1f}".rstrip("0").rstrip(".")
    if g >= 0:
        return rng.choice([f"up {s}% year over year", f"an increase of {s}%", f"(+{s}%)", f"rising {s}%",
                           f"{s}% higher than a year earlier", f"growth of {s}% on the prior year"])
    return rng.choice([f"down {s}% year over year", f"a decline of {s}%", f"(-{s}%)", f"falling {s}%",
                       f"{s}% lower than a year earlier"])


def _eps_en(rng: random.Random, eps: float, sym: str, minor: str | None) -> str:
    loss = eps < 0
    digits = 2 if round(abs(eps), 2) == abs(eps) else 3
    unit = f"{sym}{abs(eps):.{digits}f}"
    if minor and abs(eps) < 1 and rng.random() < 0.3:    # "21.4 pence (GBP 0.214)", as r02 writes it
        cents = f"{abs(eps) * 100:.1f}".rstrip("0").rstrip(".")
        unit = f"{cents} {minor} ({unit})"
    sign = "-" if loss else ""
    if loss:
        return rng.choice([f"a loss of {unit} per share", f"{sign}{unit} per diluted share",
                           f"loss per share of {unit}"])
    return rng.choice([f"{unit} per diluted share", f"diluted EPS of {unit}", f"basic earnings per share of {unit}",
                       f"EPS {unit}"])


def english_report(rng: random.Random, i: int) -> tuple[str, dict]:
    company = " ".join(w for w in (rng.choice(EN_FIRST), rng.choice(EN_SECOND), rng.choice(EN_SUFFIX)) if w)
    code, syms, minor = rng.choice(CURRENCIES)
    sym = rng.choice(syms)
    scale = 100 if code == "JPY" else 1
    revenue = round(rng.uniform(40, 9000) * scale, 1)
    if rng.random() < 0.3:
        revenue = float(round(revenue))
    margin = rng.choice([-1, 1, 1, 1]) * rng.uniform(0.02, 0.22)
    net = round(revenue * margin, 1)
    eps = round(rng.uniform(0.05, 4.5) * (1 if net >= 0 else -1) * (30 if code == "JPY" else 1), 2)
    if minor == "pence" and rng.random() < 0.5:
        eps = round(eps, 3) + (0.004 if eps > 0 else -0.004)
        eps = round(eps, 3)
    growth = round(rng.uniform(-15, 45), 1 if rng.random() < 0.5 else 0)
    gold_period, period = _period_en(rng)
    prior_rev = revenue / (1 + growth / 100)
    rev_text, revenue = _amount_en(rng, revenue, sym)
    net_text, abs_net = _amount_en(rng, abs(net), sym)
    net = abs_net if net >= 0 else -abs_net
    eps_text = _eps_en(rng, eps, sym, minor)
    g = _growth_en(rng, growth)
    net_clause = (rng.choice([f"Net income was {net_text}", f"Net profit came to {net_text}",
                              f"Profit attributable to shareholders was {net_text}"]) if net >= 0 else
                  rng.choice([f"The company posted a net loss of {net_text}", f"Net loss was {net_text}",
                              f"It reported a net loss of {net_text}"]))
    guidance = rng.choice(GUIDANCE).format(a=rng.randint(2, 12), b=rng.randint(13, 20), n=rng.randint(2, 9))
    risks = rng.sample(RISKS, 3)
    distractor = rng.choice([
        f" A year earlier revenue was {_amount_en(rng, prior_rev, sym)[0]}.",
        f" Operating cash flow was {_amount_en(rng, abs(net) * rng.uniform(1.1, 2.5), sym)[0]}.",
        f" Headcount reached {rng.randint(800, 40000):,}.", ""])
    layout = rng.randrange(4)
    if layout == 0:
        text = (f"{company} reported results for {period}. Revenue was {rev_text}, {g}. {net_clause}, or "
                f"{eps_text}.{distractor} The company {guidance}. Risks include {risks[0]}, {risks[1]} and "
                f"{risks[2]}.")
    elif layout == 1:
        text = (f"{company} ({period}): revenue of {rev_text} {g}; {net_clause[0].lower() + net_clause[1:]}; "
                f"{eps_text}.{distractor} Outlook: the company {guidance}. Key risks: {risks[0]}, {risks[1]}, "
                f"{risks[2]}.")
    elif layout == 2:
        text = (f"Results for {period} - {company}. {net_clause} on revenue of {rev_text} ({g}). Per share: "
                f"{eps_text}.{distractor} Management {guidance.replace('expects', 'expects', 1)}. It flagged "
                f"{risks[0]} and {risks[1]} as the main risks.")
    else:
        text = (f"{company} announced its {period} earnings.{distractor} Total revenue reached {rev_text}, "
                f"{g}, and {net_clause[0].lower() + net_clause[1:]} ({eps_text}). Looking ahead, it {guidance}. "
                f"Risks: {risks[0]}, {risks[1]} and {risks[2]}.")
    gold = {"company": company, "period": gold_period, "currency": code, "revenue": revenue, "net_income": net,
            "eps": eps, "revenue_growth_pct": growth}
    return text, gold


def _yi(value_m: float) -> str:
    """millions -> 亿 text ('58.62')."""
    return f"{value_m / 100:.2f}".rstrip("0").rstrip(".")


def chinese_report(rng: random.Random, i: int) -> tuple[str, dict]:
    company = rng.choice(ZH_FIRST) + rng.choice(ZH_SECOND) + rng.choice(ZH_SUFFIX)
    code, names = rng.choices(ZH_CURRENCIES, [0.8, 0.2])[0]
    cur = rng.choice(names)
    revenue = round(rng.uniform(3, 600), 2) * 100          # millions, from 亿 with two decimals
    revenue = round(revenue, 1)
    margin = rng.choice([-1, 1, 1, 1]) * rng.uniform(0.02, 0.22)
    net = round(round(revenue * margin / 100, 2) * 100, 1)
    eps = round(rng.uniform(0.02, 2.5) * (1 if net >= 0 else -1), 2)
    growth = round(rng.uniform(-12, 50), 1)
    year = rng.choice([2023, 2024, 2025])
    kind = rng.choices(["Q", "H", "FY"], [0.5, 0.2, 0.3])[0]
    if kind == "Q":
        q = rng.randint(1, 4)
        gold_period, period = f"Q{q} {year}", f"{year}年{ZH_QUARTER[q]}"
    elif kind == "H":
        gold_period, period = f"H1 {year}", f"{year}年{rng.choice(['半年度', '上半年'])}"
    else:
        gold_period, period = f"FY{year}", f"{year}年{rng.choice(['年度', '全年'])}"
    g = f"同比增长{growth}%" if growth >= 0 else f"同比下降{abs(growth)}%"
    net_clause = (f"归属于上市公司股东的净利润为{cur}{_yi(net)}亿元" if net >= 0 else
                  f"净亏损{cur}{_yi(abs(net))}亿元")
    eps_clause = (f"基本每股收益{abs(eps):.2f}元" if eps >= 0 else f"每股亏损{abs(eps):.2f}元")
    risks = rng.sample(ZH_RISKS, 3)
    doc = "报告" if kind != "FY" else "年度报告"
    text = rng.choice([
        f"{company}发布{period}{doc}。报告期内公司实现营业收入{cur}{_yi(revenue)}亿元，{g}；{net_clause}；"
        f"{eps_clause}。公司预计下一年度收入继续增长。风险提示：{risks[0]}、{risks[1]}以及{risks[2]}。",
        f"{company}{period}业绩：营业收入为{cur}{_yi(revenue)}亿元，{g}；{net_clause}，"
        f"上年同期为{_yi(abs(net) * rng.uniform(0.6, 1.4))}亿元；{eps_clause}。主要风险包括{risks[0]}、{risks[1]}。",
    ])
    gold = {"company": company, "period": gold_period, "currency": code, "revenue": revenue, "net_income": net,
            "eps": eps, "revenue_growth_pct": growth}
    return text, gold


def generate(count: int, seed: int, zh_share: float = 0.25) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    reports, golds = [], []
    n_zh = round(count * zh_share)
    for i in range(count):
        zh = i >= count - n_zh
        text, gold = (chinese_report if zh else english_report)(rng, i)
        rid = f"s{i + 1:03d}"
        reports.append({"id": rid, "lang": "zh" if zh else "en", "text": text})
        golds.append({"id": rid, **gold})
    return reports, golds


SEGMENTS = ["Industrial", "Consumer", "Services", "Digital", "International", "Wholesale", "Licensing", "Research"]
SECTION_TEXT = [
    "The {seg} segment served {n:,} customers across {k} countries during the period. Management continued to "
    "invest in sales coverage, product quality and delivery times, and reorganised the regional teams into {k2} "
    "hubs so that each market has a single point of contact for large accounts.",
    "Within {seg}, order intake was broadly stable, backlog ended the period at a level management described as "
    "healthy, and the share of recurring contracts rose. Pricing actions taken earlier offset part of the "
    "increase in input costs, while freight and energy costs eased in the second half.",
    "Capital expenditure in the {seg} business focused on automation of two plants and on the upgrade of the "
    "order management system. The board reviewed the programme twice and approved a further phase, subject to "
    "the usual investment criteria and to the outcome of customer trials now running.",
    "Employees in {seg} numbered about {n2:,} at the end of the period. Training hours per employee increased, "
    "the safety record improved, and the company extended its apprenticeship scheme to {k} additional sites.",
    "The {seg} team completed {k} product launches and retired {k2} older product lines. Customer satisfaction, "
    "measured by the annual survey, remained high, and complaint resolution times shortened markedly.",
]


def long_report(seed: int, tokens: int) -> tuple[dict, dict]:
    """One long annual-report-style document of about `tokens` tokens (SmolLM2's tokenizer: ~5.1 characters a
    token in this text): the headline results first (an English report of the main set's kinds), then segment
    sections of narrative text without the headline figures, then the headline again in a closing summary."""
    rng = random.Random(seed)
    head, gold = english_report(rng, 0)
    parts = [head]
    size = len(head)
    while size < tokens * 5.1 - len(head):
        seg = rng.choice(SEGMENTS)
        para = rng.choice(SECTION_TEXT).format(seg=seg, n=rng.randint(200, 90000), k=rng.randint(2, 30),
                                               k2=rng.randint(2, 9), n2=rng.randint(100, 20000))
        parts.append(para)
        size += len(para) + 2
    parts.append("Summary of the period: " + head)
    return {"id": f"long{seed}", "lang": "en", "text": "\n\n".join(parts)}, {"id": f"long{seed}", **gold}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--long", type=int, default=None, metavar="TOKENS",
                    help="write one long report of about TOKENS tokens instead (long_report{,_gold}.jsonl)")
    args = ap.parse_args(argv)
    if args.long:
        report, gold = long_report(args.seed, args.long)
        for name, row in (("long_report.jsonl", report), ("long_report_gold.jsonl", gold)):
            (args.out_dir / name).write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote a {len(report['text'])}-character report and its gold values to {args.out_dir}")
        return
    reports, golds = generate(args.count, args.seed)
    for name, rows in (("synthetic_reports.jsonl", reports), ("synthetic_reports_gold.jsonl", golds)):
        with open(args.out_dir / name, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(reports)} reports and gold values to {args.out_dir}")


if __name__ == "__main__":
    main()
