"""Source spans on the main job: how many of the values that match gold get a span holding the value, and what
spans, the evaluation and the summary add to the job's wall time; plus the review page's size.

    python bench/extraction_spans.py [--threads 2] [--limit N] [--sets bundled,synthetic]

The job is `sglite.extract.extract` (what `sglite extract` runs) with the bundled schema and instructions on the
default model, greedy. It runs once with spans off (timed: the job's wall time), then spans, `sglite eval`'s
evaluation against gold (bench/accuracy.py's company/period/currency rules) and the summary are computed over its
lines and timed apart, so their cost is not lost in the job's run-to-run noise; then the job runs again with
spans on, for the end-to-end figure. A span "holds the value" when its match is exact or normalized (the span's
text is the value as written, or the value in another notation: "$1.2 billion" for 1200) or fuzzy with the
text's window scoring >= 85 against the value."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from accuracy import GOLD_FIELDS, GOLD_FILES, load_gold  # noqa: E402
from extraction_accuracy import SETS, evaluation  # noqa: E402

DATA = ROOT / "examples" / "data"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--sets", default="bundled")
    args = ap.parse_args(argv)

    import sglite as sgl
    from sglite.extract import extract
    from sglite.extract.review import page_data, render
    from sglite.extract.spans import find_spans
    from sglite.extract.summary import Summary
    from sglite.extract.inputs import Document, id_key

    schema = json.loads((DATA / "financial_report.schema.json").read_text())
    prompt = (DATA / "financial_report.prompt.txt").read_text()
    rt = sgl.Runtime(num_threads=args.threads)
    try:
        list(extract(["Acme Corp. Q1 2024 revenue $1.0 million."], schema, prompt, backend=rt, spans=False))
        for name in args.sets.split(","):
            docs = [json.loads(x) for x in open(DATA / SETS[name][0], encoding="utf-8")][:args.limit]
            gold = load_gold(DATA / GOLD_FILES[name])
            rt.flush_cache()
            t0 = time.perf_counter()
            lines = list(extract([(d["id"], d["text"]) for d in docs], schema, prompt, backend=rt, spans=False))
            job_s = time.perf_counter() - t0

            text = {d["id"]: d["text"] for d in docs}
            t0 = time.perf_counter()
            summary = Summary(schema)
            for line in lines:
                if line["record"] is not None:
                    line["spans"] = find_spans(line["record"], text[line["id"]])
                summary.add(line)
            ev = evaluation({x["id"]: x["record"] for x in lines}, gold)
            summary.table()
            ev.table()
            extra_s = time.perf_counter() - t0

            rt.flush_cache()
            t0 = time.perf_counter()
            list(extract([(d["id"], d["text"]) for d in docs], schema, prompt, backend=rt, spans=True))
            job_spans_s = time.perf_counter() - t0

            kinds = {f: {"right": 0, "exact": 0, "normalized": 0, "fuzzy": 0, "not_found": 0} for f in GOLD_FIELDS}
            by_id = {x["id"]: x for x in lines}
            for (key, field), ok in ev.right.items():
                if ok:
                    doc_id = json.loads(key)
                    kinds[field]["right"] += 1
                    kinds[field][by_id[doc_id]["spans"][f"/{field}"]["match"]] += 1
            print(f"\n### {name}: {len(docs)} reports, threads {args.threads}\n")
            print("| field | values right vs gold | span holds it (exact + normalized + fuzzy) | exact | normalized "
                  "| fuzzy | not found |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            tot = {k: 0 for k in kinds[GOLD_FIELDS[0]]}
            for f, k in kinds.items():
                held = k["exact"] + k["normalized"] + k["fuzzy"]
                print(f"| {f} | {k['right']} | {held} | {k['exact']} | {k['normalized']} | {k['fuzzy']} | "
                      f"{k['not_found']} |")
                for key in tot:
                    tot[key] += k[key]
            held = tot["exact"] + tot["normalized"] + tot["fuzzy"]
            print(f"| **total** | {tot['right']} | {held} ({held / max(1, tot['right']):.1%}) | {tot['exact']} | "
                  f"{tot['normalized']} | {tot['fuzzy']} | {tot['not_found']} |")
            valid = sum(x["record"] is not None for x in lines)
            print(f"\nvalid {valid}/{len(docs)}; job wall time, spans off: {job_s:.2f} s; spans + evaluation + "
                  f"summary over its lines: {extra_s * 1000:.1f} ms ({extra_s / job_s:.2%} of the job); job with "
                  f"spans on: {job_spans_s:.2f} s ({job_spans_s / job_s - 1:+.1%}, run-to-run noise included)")
            docs_map = {id_key(d["id"]): Document(d["id"], d["text"], "") for d in docs}
            page = render(page_data(lines, docs_map, {id_key(k): v for k, v in gold.items()}))
            print(f"review page for these {len(docs)} documents: {len(page.encode()) / 1e3:.0f} kB")
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
