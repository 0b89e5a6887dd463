"""`sglite batch` on the main job: the 20 bundled reports as an OpenAI batch file (one /v1/chat/completions line
each: the instructions as the system message, the report as the user message, the schema as response_format),
run through `sglite batch`, beside the same bodies sent to the chat route of the same server app, in one run.

    python bench/batch_main_job.py [--threads 2] [--limit N] [--keep DIR]

Prints: output lines the `openai` package's types parse, contents equal to the chat route's answers, records
that validate, and both wall times (20 requests in flight each time)."""
from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "data"


def batch_lines(limit: int | None) -> list[dict]:
    schema = json.loads((DATA / "financial_report.schema.json").read_text())
    prompt = (DATA / "financial_report.prompt.txt").read_text().strip()
    docs = [json.loads(x) for x in open(DATA / "reports.jsonl", encoding="utf-8")][:limit]
    return [{"custom_id": d["id"], "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "smollm2", "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": d["text"]}],
        "temperature": 0, "max_tokens": 512,
        "response_format": {"type": "json_schema", "json_schema": {"name": "FinancialReport", "schema": schema}}}}
        for d in docs]


async def chat_route(engine, lines: list[dict]) -> tuple[dict[str, dict], float]:
    import httpx

    from sglite.server import ModelInfo, create_app

    app = create_app(engine, ModelInfo.from_engine(engine))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        t0 = time.perf_counter()
        answers = await asyncio.gather(*(client.post(x["url"], json={k: v for k, v in x["body"].items()
                                                                        if k != "model"}, timeout=None)
                                         for x in lines))
        return {x["custom_id"]: a.json() for x, a in zip(lines, answers)}, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="write the batch input and output files here")
    args = ap.parse_args(argv)

    import jsonschema
    from openai.types.chat import ChatCompletion

    from sglite.extract.batch import main as batch_main
    from sglite.runtime.engine import Engine

    lines = batch_lines(args.limit)
    folder = args.keep or Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    src, out = folder / "main_job.batch.jsonl", folder / "main_job.batch.out.jsonl"
    src.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    out.unlink(missing_ok=True)
    engine = Engine(None, num_threads=args.threads, background=True)
    try:
        asyncio.run(chat_route(engine, lines[:2]))   # warm-up
        engine.flush_cache()
        t0 = time.perf_counter()
        rc = batch_main([str(src), "-o", str(out), "--max-in-flight", str(len(lines))], engine=engine)
        batch_s = time.perf_counter() - t0
        engine.flush_cache()
        direct, chat_s = asyncio.run(chat_route(engine, lines))
    finally:
        engine.shutdown()
    schema = lines[0]["body"]["response_format"]["json_schema"]["schema"]
    got = {x["custom_id"]: x for x in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    parsed = equal = valid = 0
    for cid, want in direct.items():
        body = got[cid]["response"]["body"]
        completion = ChatCompletion.model_validate(body)
        parsed += 1
        content = completion.choices[0].message.content
        equal += content == want["choices"][0]["message"]["content"]
        try:
            jsonschema.validate(json.loads(content), schema)
            valid += 1
        except (json.JSONDecodeError, jsonschema.ValidationError):
            pass
    n = len(lines)
    print(f"sglite batch exit status {rc}; files in {folder}\n")
    print("| requests | openai types parse | equal to the chat route | records valid | batch wall s | chat route "
          "wall s |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {n} | {parsed}/{n} | {equal}/{n} | {valid}/{n} | {batch_s:.1f} | {chat_s:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
