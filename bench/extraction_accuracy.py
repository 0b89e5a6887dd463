"""Field accuracy of the main job, field by field: sglite under each JSON whitespace mode beside llama.cpp's server
on the same GGUF, the same chat messages and the same schema, in one run (issue 14).

    python bench/extraction_accuracy.py                                  # modes compact,standard,flexible
    python bench/extraction_accuracy.py --modes standard --skip-llamacpp --limit 5

For every system: outputs that validate, gold fields right per field and in total (rules: bench/accuracy.py),
and few-shot leaks: records whose `guidance` or a `risks` item is copied from the example program's few-shot
answers (text the report itself does not contain). llama-server gets `response_format: json_schema` with the
example's pydantic schema; its grammar allows bounded whitespace (llama.cpp's json-schema-to-grammar). The
sglite Engine is built once per mode with `json_whitespace=<mode>` and otherwise default options."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from accuracy import load_gold, print_accuracy_table, score_job  # noqa: E402
from vs_llamacpp import (DEFAULT_BIN_DIR, LlamaServer, SgliteSide, chat_messages, find_binaries,  # noqa: E402
                         load_example)

MODES = ("compact", "standard", "flexible", "any")


def few_shot_leaks(example, docs: list[dict], records: dict[str, dict | None]) -> int:
    """Records with guidance or a risk copied from a few-shot answer that their own report does not contain."""
    shots = [record for _, record in example.FEW_SHOT]
    copied_guidance = {s["guidance"] for s in shots}
    copied_risks = {r for s in shots for r in s["risks"]}
    text = {d["id"]: d["text"] for d in docs}
    leaks = 0
    for doc_id, rec in records.items():
        if not isinstance(rec, dict):
            continue
        got = [rec.get("guidance")] if rec.get("guidance") in copied_guidance else []
        got += [r for r in rec.get("risks") or [] if r in copied_risks]
        if any(isinstance(g, str) and g not in text[doc_id] for g in got):
            leaks += 1
    return leaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="compact,standard,flexible",
                    help=f"comma list of sglite json_whitespace modes, of {MODES}")
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2 Q4_1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N reports")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    ap.add_argument("--ctx-per-slot", type=int, default=2048)
    ap.add_argument("--dump", type=Path, default=None, help="write every record (JSONL: system, id, record)")
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        ap.error(f"--modes takes {MODES}, got {args.modes!r}")
    exes = None if args.skip_llamacpp else find_binaries(args.llamacpp_bin)   # fail before any work

    from sglite.runtime.model_source import resolve_model_path

    gguf = resolve_model_path(args.model)
    example = load_example()
    docs = example.load_reports(ROOT / "examples" / "data" / "reports.jsonl", args.limit)
    gold = load_gold()
    print(f"model: {gguf.name}; {len(docs)} reports; threads {args.threads}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)

    jobs: dict[str, Any] = {}
    if exes:
        print("llama.cpp: llama-server ...", file=sys.stderr, flush=True)
        with LlamaServer(exes["llama-server"], gguf, args.threads, args.ctx_per_slot) as server:
            jobs["llama.cpp"] = server.main_job(example, docs)
    for mode in modes:
        print(f"sglite json_whitespace={mode} ...", file=sys.stderr, flush=True)
        side = SgliteSide(gguf, {"num_threads": args.threads, "json_whitespace": mode})
        try:
            jobs[f"sglite {mode}"] = side.main_job(example, docs)
        finally:
            side.shutdown()

    scores = {name: score_job(job.records, gold) for name, job in jobs.items()}
    print("\n| system | valid | gold fields right | few-shot leaks | wall s |")
    print("|---|---:|---:|---:|---:|")
    for name, job in jobs.items():
        right, total = scores[name]["total"]
        print(f"| {name} | {job.valid}/{len(docs)} | {right}/{total} | "
              f"{few_shot_leaks(example, docs, job.records)}/{len(docs)} | {job.wall_s:.1f} |")
    print("\nfield accuracy against examples/data/reports_gold.jsonl (rules: bench/accuracy.py)\n")
    print_accuracy_table(scores)
    for name, job in jobs.items():
        for doc_id, why in job.errors.items():
            print(f"{name} {doc_id} not valid: {why}")
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as f:
            for name, job in jobs.items():
                for doc_id, record in job.records.items():
                    f.write(json.dumps({"system": name, "id": doc_id, "record": record}, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
