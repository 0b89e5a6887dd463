"""Batch extraction with JSON outputs: one schema-constrained record per financial report excerpt.

    python examples/financial_report_extraction.py            # 20 bundled reports (English and Chinese)
    python examples/financial_report_extraction.py --limit 5 --output out.jsonl

Every program shares the same instructions and few-shot turns; run_batch prefills that prefix once, then the
engine batches all the extractions together. Each output is constrained by the pydantic schema's JSON Schema,
so it parses and validates, and its grounded fields (GROUNDED) come from the report itself: the company a
verbatim span of it, the period and currency among those it names, the figures numbers it writes, each read
in the unit and sign its place in the text gives. `--plain` generates every field freely under the schema
alone."""
from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, constr

import sglite as sgl
from sglite.protocol import load_json_schema

HERE = Path(__file__).resolve().parent


class FinancialReport(BaseModel):
    model_config = ConfigDict(extra="forbid")   # additionalProperties: false, so the grammar allows no other keys

    company: str = Field(max_length=60)
    period: str = Field(max_length=24, description="e.g. Q3 2024, H1 2024, FY2023")
    currency: str = Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code")
    revenue: float = Field(description="in millions of the currency")
    net_income: float = Field(description="in millions of the currency; negative for a loss")
    eps: float = Field(description="earnings per share in the currency")
    revenue_growth_pct: float = Field(description="year-over-year revenue growth in percent")
    guidance: str = Field(max_length=120)
    risks: list[constr(max_length=60)] = Field(min_length=1, max_length=3)


# fields taken from the report, the source named "document" (sglite/grounding.py; `sglite extract` gives each
# input document under that name): the values the model may write are those the text holds. A figure is read
# where it stands: in the unit written after it (the field is in millions: `1.92 billion` is 1920, `58.62亿` 5862)
# and negative where its clause says so (`a net loss of`, `同比下降`), so the model points and Python multiplies;
# years and days of dates are not figures.
_UNITS = {"million": 1, "mn": 1, "m": 1, "billion": 1000, "bn": 1000, "thousand": 0.001, "亿": 100, "億": 100,
          "万": 0.01, "兆": 1_000_000, "Mio.": 1, "Mrd.": 1000, "millones": 1, "mil millones": 1000, "milliard": 1000}
_CENTS = {"cents": 0.01, "cent": 0.01, "pence": 0.01, "p": 0.01}     # EPS is in the currency: 18.7p is 0.187
_PERCENT = {"%": 1, "％": 1, "percent": 1, "per cent": 1, "pct": 1}     # growth: a percentage, nothing else
_LOSS = ["loss", "losses", "亏损", "損失", "赤字", "Verlust", "perte", "pérdida"]
_DOWN = ["down", "decline", "declined", "declining", "decrease", "decreased", "fell", "falling", "lower", "下降",
         "减少", "下滑", "減", "Rückgang", "baisse", "menos"]
GROUNDED = {
    "company": {"x-sglite-span": "document"},
    "period": {"x-sglite-term": {"source": "document", "kind": "period", "fallback": "free"}},
    "currency": {"x-sglite-term": {"source": "document", "kind": "currency", "fallback": "free"}},
    "revenue": {"x-sglite-number": {"source": "document", "units": _UNITS}},
    "net_income": {"x-sglite-number": {"source": "document", "units": _UNITS, "negative_words": _LOSS}},
    "eps": {"x-sglite-number": {"source": "document", "units": _CENTS, "negative_words": _LOSS}},
    "revenue_growth_pct": {"x-sglite-number": {"source": "document", "units": _PERCENT, "unit_required": True,
                                               "negative_words": _DOWN}},
}


def grounded_schema() -> dict:
    """FinancialReport's JSON Schema with the GROUNDED fields' source keywords."""
    schema = load_json_schema(FinancialReport)
    for name, extra in GROUNDED.items():
        schema["properties"][name] = {**schema["properties"][name], **extra}
    return schema


INSTRUCTIONS = (
    "You extract structured data from financial report excerpts. Reply with one JSON object. "
    "period: the quarter (Q1-Q4), half year (H1, H2) or full fiscal year (FY) the report covers, with its year. "
    "Amounts are in millions of the reporting currency (1 billion = 1000 million; 亿元 = 100 million), written "
    "without thousands separators; a loss is negative. "
    "Use ISO currency codes (USD, EUR, GBP, CNY, HKD, ...). Guidance and risks come from this report only; "
    "keep them short.")

FEW_SHOT = [
    ("Greywater Instruments Inc. reported Q2 2024 revenue of $245.0 million, up 8% year over year. Net income "
     "was $19.6 million, or $0.41 per diluted share. The company expects full-year revenue of $1.0 billion. "
     "Risks include tariff changes and supplier concentration.",
     {"company": "Greywater Instruments Inc.", "period": "Q2 2024", "currency": "USD", "revenue": 245.0,
      "net_income": 19.6, "eps": 0.41, "revenue_growth_pct": 8.0, "guidance": "FY2024 revenue of $1.0 billion",
      "risks": ["tariff changes", "supplier concentration"]}),
    ("白鹭物流股份有限公司2024年年度报告：全年实现营业收入32.5亿元，同比增长12.0%；归属于上市公司股东的净利润为2.10亿元；"
     "基本每股收益0.35元。公司预计2025年业务量增长10%。风险提示：燃油价格波动、行业竞争加剧。",
     {"company": "白鹭物流股份有限公司", "period": "FY2024", "currency": "CNY", "revenue": 3250.0,
      "net_income": 210.0, "eps": 0.35, "revenue_growth_pct": 12.0, "guidance": "2025年业务量增长10%",
      "risks": ["燃油价格波动", "行业竞争加剧"]}),
]


@sgl.function
def extract_report(s, report: str, grounded: bool = True, confidence: bool = False):
    """`confidence`: the record's meta_info carries its constrained logprobs (field confidence)."""
    s += sgl.system(INSTRUCTIONS)
    for text, record in FEW_SHOT:
        s += sgl.user(text)
        s += sgl.assistant(json.dumps(record, ensure_ascii=False))
    s += sgl.user(report)
    extra = {"return_constrained_logprob": True} if confidence else {}
    if grounded:
        record = sgl.gen("record", max_tokens=512, json_schema=grounded_schema(), sources={"document": report},
                         temperature=0, **extra)
    else:
        record = sgl.gen("record", max_tokens=512, json_schema=FinancialReport, temperature=0, **extra)
    s += sgl.assistant(record)


def load_reports(path: Path, limit: int | None = None) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return docs[:limit] if limit else docs


def run_job(docs: list[dict], backend, progress_bar: bool = True, grounded: bool = True) -> dict:
    """Extract every doc (grounded fields unless `grounded` is False); returns records (parsed or None),
    errors, validation results, field confidence (where the backend gives it) and job stats."""
    import jsonschema

    from sglite.extract.confidence import field_confidence

    schema = FinancialReport.model_json_schema()
    backend.usage.reset()
    t0 = time.perf_counter()
    confidence = getattr(backend, "constrained_logprobs", False)
    states = extract_report.run_batch([{"report": d["text"], "grounded": grounded, "confidence": confidence}
                                       for d in docs],
                                      backend=backend, progress_bar=progress_bar)
    elapsed = time.perf_counter() - t0
    results = []
    for doc, st in zip(docs, states):
        err = st.error()
        raw = None if err else st["record"]
        record, valid, why = None, False, str(err) if err else ""
        if raw is not None:
            try:
                record = json.loads(raw)
                jsonschema.validate(record, schema)
                valid = True
            except (json.JSONDecodeError, jsonschema.ValidationError) as e:
                why = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        scores = field_confidence(raw, (st.get_meta_info("record") or {}).get(
            "output_token_constrained_logprobs") or []) if valid and confidence else {}
        results.append({"id": doc["id"], "lang": doc.get("lang"), "record": record, "raw": raw,
                        "valid": valid, "error": why or None, "confidence": scores})
    usage = backend.usage.as_dict()
    return {"results": results, "elapsed_s": elapsed, "usage": usage,
            "docs_per_s": len(docs) / elapsed if elapsed else 0.0,
            "output_tok_per_s": usage["completion_tokens"] / elapsed if elapsed else 0.0,
            "valid": sum(r["valid"] for r in results)}


def write_results(results: list[dict], path: Path) -> None:
    """One JSON line per document in `sglite extract`'s format: the id beside the record, never mixed into it;
    a failed document's line has `record: null`, `error` and `raw`."""
    with open(path, "w", encoding="utf-8") as f:
        for r in results:
            line = {"id": r["id"], "record": r["record"] if r["valid"] else None}
            if r.get("confidence"):
                line["confidence"] = r["confidence"]
            if not r["valid"]:
                line.update(error=r["error"], raw=r["raw"])
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def _cell(value, width: int) -> str:
    """`value` padded to `width` terminal columns (CJK characters take two)."""
    text = "" if value is None else (f"{value:,.2f}" if isinstance(value, float) else str(value))
    out, used = "", 0
    for ch in text:
        w = 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        if used + w > width - 1 and len(text) > len(out) + 1:
            return out + "…" + " " * (width - used - 1)
        out, used = out + ch, used + w
    return out + " " * (width - used)


def print_table(results: list[dict]) -> None:
    cols = [("id", 4), ("company", 28), ("period", 10), ("cur", 4), ("revenue", 11), ("net_income", 11),
            ("eps", 7), ("ok", 3)]
    print("  ".join(_cell(name, w) for name, w in cols))
    for r in results:
        rec = r["record"] or {}
        row = [r["id"], rec.get("company"), rec.get("period"), rec.get("currency"), rec.get("revenue"),
               rec.get("net_income"), rec.get("eps"), "yes" if r["valid"] else "NO"]
        print("  ".join(_cell(v, w) for v, (_, w) in zip(row, cols)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", type=Path, default=HERE / "data" / "reports.jsonl")
    ap.add_argument("--output", type=Path, default=Path("financial_reports.jsonl"))
    ap.add_argument("--model", default=None, help="model path (default: the bundled SmolLM2)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--plain", action="store_true", help="no grounded fields: the schema alone")
    args = ap.parse_args(argv)

    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    docs = load_reports(args.input, args.limit)
    print(f"loading model on {device} ...", file=sys.stderr)
    backend = sgl.Runtime(args.model, device=device)
    try:
        job = run_job(docs, backend, grounded=not args.plain)
    finally:
        backend.shutdown()
    write_results(job["results"], args.output)
    print_table(job["results"])
    u = job["usage"]
    print(f"\n{len(docs)} reports in {job['elapsed_s']:.1f} s: {job['docs_per_s']:.2f} reports/s, "
          f"{job['output_tok_per_s']:.0f} output tokens/s")
    print(f"prefix cache hit rate: {u['cache_hit_rate']:.1%} ({u['cached_tokens']} of {u['prompt_tokens']} "
          f"prompt tokens)")
    print(f"validated against the JSON Schema: {job['valid']}/{len(docs)}")
    print(f"wrote {args.output}")
    for r in job["results"]:
        if not r["valid"]:
            print(f"  {r['id']}: {r['error']}", file=sys.stderr)
    return 0 if job["valid"] == len(docs) else 1


if __name__ == "__main__":
    sys.exit(main())
