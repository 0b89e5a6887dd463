"""Jump-forward on JSON extractions (real SmolLM2-135M, greedy, one batch), with jump-forward on and off in the
same run: the main job's 20 financial reports, and 20 short contact notes with nine short fields.

    python bench/jump_forward.py [--limit 20] [--threads N]

Reports, per mode: forward passes of the batch, forward passes per request (each sampled token costs one; jump-
forward tokens ride along in the next extend), output tokens, outputs that validate, wall time, and how many
outputs are identical between the two modes (a drift check: greedy text should not depend on jump-forward)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def prompts_and_schema(tok, limit: int | None):
    from financial_report_extraction import FEW_SHOT, HERE, INSTRUCTIONS, FinancialReport, load_reports

    docs = load_reports(HERE / "data" / "reports.jsonl", limit)
    shots = []
    for text, record in FEW_SHOT:
        shots += [{"role": "user", "content": text},
                  {"role": "assistant", "content": json.dumps(record, ensure_ascii=False)}]
    prompts = [tok.apply_chat_template([{"role": "system", "content": INSTRUCTIONS}, *shots,
                                        {"role": "user", "content": d["text"]}]) for d in docs]
    return prompts, FinancialReport.model_json_schema()


CONTACT_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 40}, "title": {"type": "string", "maxLength": 40},
        "company": {"type": "string", "maxLength": 40}, "email": {"type": "string", "format": "email"},
        "phone": {"type": "string", "pattern": "^\\+[0-9]{1,3} [0-9 ]{6,14}$"},
        "city": {"type": "string", "maxLength": 30},
        "country": {"enum": ["USA", "UK", "Germany", "France", "Japan", "China", "Brazil", "India"]},
        "is_customer": {"type": "boolean"}, "employees": {"type": "integer", "minimum": 1}},
    "required": ["name", "title", "company", "email", "phone", "city", "country", "is_customer", "employees"]}


def contact_prompts(tok, n: int) -> list[str]:
    """n short business-contact notes (deterministic), each asking for one CONTACT_SCHEMA record."""
    import random
    rng = random.Random(0)
    first = "Maria James Wei Aisha Lukas Chloe Ravi Sofia Kenji Olivia".split()
    last = "Lopez Carter Zhang Khan Becker Martin Patel Rossi Tanaka Brown".split()
    titles = ["Head of Procurement", "CFO", "Data Engineer", "Sales Director", "Office Manager"]
    places = [("Austin", "USA", "+1"), ("Leeds", "UK", "+44"), ("Munich", "Germany", "+49"),
              ("Lyon", "France", "+33"), ("Osaka", "Japan", "+81"), ("Shenzhen", "China", "+86"),
              ("Recife", "Brazil", "+55"), ("Pune", "India", "+91")]
    companies = ["Northwind Labs", "Bluefin Foods", "Cedar Analytics", "Helios Power", "Quartz Mobility"]
    out = []
    for _ in range(n):
        f, l, t, c = rng.choice(first), rng.choice(last), rng.choice(titles), rng.choice(companies)
        city, country, code = rng.choice(places)
        phone = f"{code} {rng.randint(100, 999)} {rng.randint(1000, 9999)}"
        note = (f"Met {f} {l}, {t} at {c} ({rng.randint(20, 5000)} employees), based in {city}, {country}. "
                f"Email {f.lower()}.{l.lower()}@{c.split()[0].lower()}.com, phone {phone}. "
                f"{'Already a customer.' if rng.random() < 0.5 else 'Not a customer yet.'}")
        out.append(tok.apply_chat_template([
            {"role": "system", "content": "Extract the contact as one JSON object with the fields name, title, "
                                          "company, email, phone, city, country, is_customer, employees."},
            {"role": "user", "content": note}]))
    return out


def run(model, prompts, schema, jump_forward: bool) -> dict:
    import jsonschema

    from sglite.runtime.engine import Engine

    params = {"temperature": 0, "max_new_tokens": 512, "json_schema": schema}
    with Engine(model, enable_jump_forward=jump_forward) as engine:
        engine.generate(prompts[0], {"max_new_tokens": 1})          # warm: compile, shared prefix cached
        base = engine.get_stats()["forward_passes"]
        t0 = time.perf_counter()
        outs = engine.generate(prompts, [params] * len(prompts))
        wall = time.perf_counter() - t0
        passes = engine.get_stats()["forward_passes"] - base
    valid = 0
    for o in outs:
        try:
            jsonschema.validate(json.loads(o["text"]), schema)
            valid += o["meta_info"]["finish_reason"]["type"] == "stop"
        except (json.JSONDecodeError, jsonschema.ValidationError):
            pass
    completion = sum(o["meta_info"]["completion_tokens"] for o in outs)
    forced = sum(o["meta_info"]["forced_tokens"] for o in outs)
    return {"texts": [o["text"] for o in outs], "batch_passes": passes, "request_passes": completion - forced,
            "tokens": completion, "forced": forced, "valid": valid, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    import torch

    from sglite.runtime.model import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model()
    reports, schema = prompts_and_schema(model.tokenizer, args.limit)
    workloads = [("financial reports (the main job: long free-text fields)", reports, schema),
                 ("contact notes (nine short fields)", contact_prompts(model.tokenizer, len(reports)),
                  CONTACT_SCHEMA)]
    for title, prompts, schema in workloads:
        report(title, prompts, run(model, prompts, schema, False), run(model, prompts, schema, True))


def report(title: str, prompts: list, off: dict, on: dict) -> None:
    same = sum(a == b for a, b in zip(on["texts"], off["texts"]))
    n = len(prompts)
    print(f"\nJSON extraction, {n} {title}, greedy, one batch; jump-forward off vs on")
    print("| | forward passes (batch) | forward passes (sum per request) | output tokens | of which forced "
          "| valid | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in (("off", off), ("on", on)):
        print(f"| {name} | {r['batch_passes']} | {r['request_passes']} | {r['tokens']} | {r['forced']} "
              f"| {r['valid']}/{n} | {r['wall']:.1f} |")
    cut_b = 1 - on["batch_passes"] / off["batch_passes"]
    cut_r = 1 - on["request_passes"] / off["request_passes"]
    print(f"\nforward passes cut: {cut_b:.0%} (batch), {cut_r:.0%} (per request); target >= 30%")
    print(f"outputs identical with and without jump-forward: {same}/{n} (greedy text can differ where the "
          f"model, writing forced text itself, splits it into other tokens than the tokenizer would)")


if __name__ == "__main__":
    main()
