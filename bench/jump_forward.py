"""Jump-forward on a JSON extraction: the main job's 20 financial-report extractions (real SmolLM2-135M, greedy,
one batch), with jump-forward on and off in the same run.

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
    prompts, schema = prompts_and_schema(model.tokenizer, args.limit)
    off = run(model, prompts, schema, False)
    on = run(model, prompts, schema, True)
    same = sum(a == b for a, b in zip(on["texts"], off["texts"]))
    n = len(prompts)
    print(f"JSON extraction, {n} financial reports, greedy, one batch; jump-forward off vs on")
    print("| | forward passes (batch) | forward passes (sum per request) | output tokens | of which forced "
          "| valid | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in (("off", off), ("on", on)):
        print(f"| {name} | {r['batch_passes']} | {r['request_passes']} | {r['tokens']} | {r['forced']} "
              f"| {r['valid']}/{n} | {r['wall']:.1f} |")
    cut_b = 1 - on["batch_passes"] / off["batch_passes"]
    cut_r = 1 - on["request_passes"] / off["request_passes"]
    print(f"\nforward passes cut: {cut_b:.0%} (batch), {cut_r:.0%} (per request); target >= 30%")
    print(f"outputs identical with and without jump-forward: {same}/{n}")


if __name__ == "__main__":
    main()
