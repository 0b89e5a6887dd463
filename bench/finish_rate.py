"""Constrained generation that finishes: how often a JSON-schema output ends, valid, before the token
budget, with each generation-mode measure off and on, beside llama.cpp's server on the same GGUF and prompts.

    python bench/finish_rate.py                         # every configuration and llama.cpp (CPU: ~10-20 min)
    python bench/finish_rate.py --skip-llamacpp --configs baseline,all --limit 8
    python bench/finish_rate.py --dry 0.5,0.8,1.2        # also "all" at each DRY multiplier
    python bench/finish_rate.py --configs shipped --dry 0.8+nc --skip-llamacpp   # the defaults; "+nc": breakers

A fixed set of 24 real schemas (6 each from MaskBench's Github_easy, Github_medium, Glaiveai2K and Snowplow in
../shared/data; none used by a test). Per schema one chat prompt asks for "one realistic JSON instance of this JSON
Schema"; greedy, at most 384 new tokens. sglite runs the Engine as the lead's default does (closed objects,
--whitespace, schema property order), all 24 prompts in one batch, with:
- baseline: the engine's grammar, DRY off;
- +dup-keys: `unique_keys` (no property name twice in an object);
- +caps: `GenerationCaps()` (string chars, array items, recursion depth);
- +DRY: dry_multiplier --dry-default (llama.cpp's other DRY defaults);
- +close: `close_at_budget` (the last tokens of the budget spent on the grammar's shortest completion);
- all: the four together;
- shipped: the engine exactly as shipped (its own compile options, no DRY field in the request: its JSON default).
`--dry M` adds "all" at DRY M; "M+nc" also sets the sequence breakers to "\n" and ":" only (llama.cpp's '"' and
'*' dropped), "M+ll" to llama.cpp's four; "+aN" sets dry_allowed_length N ("0.8+nc+a3").
llama.cpp: llama-server (bench/vs_llamacpp.py starts it) with `response_format: json_schema`, temperature 0,
max_tokens 384. Each row: finished and valid (finish_reason stop and the text validates), finished but invalid,
stopped by `length`, mean completion tokens, and (sglite) the values closed at a cap and the outputs closed at
the budget (these count as finished and valid: they end, valid, with finish_reason stop; the OpenAI API reports
them as `length`)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from vs_llamacpp import DEFAULT_BIN_DIR, SLOTS, LlamaServer, check_output, find_binaries  # noqa: E402

DATA = BENCH.parent.parent / "shared" / "data" / "maskbench"
SCHEMAS = [
    "Github_easy---o91096.json", "Github_easy---o79495.json", "Github_easy---o37092.json",
    "Github_easy---o89833.json", "Github_easy---o21114.json", "Github_easy---o60269.json",
    "Github_medium---o44258.json", "Github_medium---o24621.json", "Github_medium---o61588.json",
    "Github_medium---o60866.json", "Github_medium---o9950.json", "Github_medium---o30411.json",
    "Glaiveai2K---generate_invoice_e418deb9.json", "Glaiveai2K---search_news_articles_13bd736a.json",
    "Glaiveai2K---create_invoice_1fc8f8ba.json", "Glaiveai2K---calculate_area_8ca6f690.json",
    "Glaiveai2K---create_event_3a2451b9.json", "Glaiveai2K---search_hotels_c8d642e8.json",
    "Snowplow---sp_154_Normalized.json", "Snowplow---sp_147_Normalized.json", "Snowplow---sp_366_Normalized.json",
    "Snowplow---sp_419_Normalized.json", "Snowplow---sp_257_Normalized.json", "Snowplow---sp_6_Normalized.json",
]
MAX_TOKENS = 384
CONFIGS = ("baseline", "+dup-keys", "+caps", "+DRY", "+close", "all", "shipped")
BREAKER_SETS = {"nc": ("\n", ":"), "ll": ("\n", ":", '"', "*")}


class Row(NamedTuple):
    name: str
    valid: int
    invalid: int
    length: int
    mean_tokens: float
    capped: int | None
    closed: int | None
    wall_s: float
    failures: list[str]


def messages(schema: dict) -> list[dict]:
    return [{"role": "user", "content": "Write one realistic JSON instance of this JSON Schema:\n"
                                        + json.dumps(schema)}]


def tally(name: str, schemas: list[dict], outs: list[tuple[str | None, str, int, int, bool]], wall: float,
          with_caps: bool, with_close: bool) -> Row:
    """outs: (text, finish reason, completion tokens, capped values, closed at the budget) per schema."""
    valid = invalid = length = capped = closed = 0
    failures = []
    for schema, (text, reason, _, nc, at_budget) in zip(schemas, outs):
        capped += nc
        closed += at_budget
        if reason == "length":
            length += 1
            failures.append(f"length: {(text or '')[-80:]!r}")
            continue
        _, why = check_output(text, schema)
        if why is None and reason == "stop":
            valid += 1
        else:
            invalid += 1
            failures.append(f"{reason}: {why} {(text or '')[:80]!r}")
    mean = statistics.mean(o[2] for o in outs)
    return Row(name, valid, invalid, length, mean, capped if with_caps else None, closed if with_close else None,
               wall, failures)


# --- sglite ------------------------------------------------------------------------------------------------------
def sglite_rows(args, schemas: list[dict]) -> list[Row]:
    from sglite.runtime.constrained.ir.generation_caps import GenerationCaps
    from sglite.runtime.engine import Engine

    engine = Engine(args.model, json_whitespace=args.whitespace, num_threads=args.threads,
                    max_running_requests=max(len(schemas), 1))
    compiler = engine.core.grammar._get_compiler()
    compile_plain = compiler.compile_json_schema
    prompts = [engine.tokenizer.apply_chat_template(messages(s)) for s in schemas]
    texts = [json.dumps(s) for s in schemas]
    wanted = args.configs + [f"all, DRY {d}" for d in args.dry]     # in the order asked for
    rows = []
    for name in wanted:
        params: dict[str, Any] = {"temperature": 0, "max_new_tokens": MAX_TOKENS}
        close = name in ("shipped", "+close", "all") or name.startswith("all")
        if name == "shipped":
            compiler.compile_json_schema = compile_plain
            caps = True
        else:
            params["close_at_budget"] = close
            dry = args.dry_default if name in ("+DRY", "all") else 0.0
            if name.startswith("all, DRY"):
                mult, *extras = name.split()[-1].split("+")
                dry = float(mult)
                for extra in extras:
                    if extra in BREAKER_SETS:
                        params["dry_sequence_breakers"] = list(BREAKER_SETS[extra])
                    else:
                        params["dry_allowed_length"] = int(extra[1:])
            params["dry_multiplier"] = dry
            unique = name in ("+dup-keys", "all") or name.startswith("all")
            caps = GenerationCaps() if name in ("+caps", "all") or name.startswith("all") else None
            # the engine's compile call (closed objects, its whitespace and order) plus this configuration's
            # options (the engine passes its own unique_keys/caps: this configuration's win)
            compiler.compile_json_schema = lambda *a, _u=unique, _c=caps, **k: compile_plain(
                *a, **{**k, "unique_keys": _u, "caps": _c})
        engine.flush_cache()
        t0 = time.perf_counter()
        res = engine.generate(prompts, [{**params, "json_schema": t} for t in texts])
        wall = time.perf_counter() - t0
        outs = [(r["text"], r["meta_info"]["finish_reason"]["type"], r["meta_info"]["completion_tokens"],
                 r["meta_info"].get("capped_values", 0), r["meta_info"].get("closed_at_budget", False)) for r in res]
        rows.append(tally(f"sglite {name}", schemas, outs, wall, caps is not None, close))
        print(f"  {_line(rows[-1], len(schemas))}", flush=True)
    engine.shutdown()
    return rows


# --- llama.cpp ---------------------------------------------------------------------------------------------------
def llamacpp_row(args, schemas: list[dict], gguf: Path) -> Row:
    exes = find_binaries(args.llamacpp_bin)

    with LlamaServer(exes["llama-server"], gguf, args.threads, ctx_per_slot=4096) as server:
        def one(schema: dict) -> tuple[str | None, str, int, int, bool]:
            r = server.client.post("/v1/chat/completions", json={
                "messages": messages(schema), "temperature": 0, "max_tokens": MAX_TOKENS, "seed": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "instance", "schema": schema}}})
            if r.status_code != 200:
                return None, f"HTTP {r.status_code}: {r.text[:120]}", 0, 0, False
            body = r.json()
            choice = body["choices"][0]
            return choice["message"]["content"], choice["finish_reason"], body["usage"]["completion_tokens"], 0, False

        t0 = time.perf_counter()
        with ThreadPoolExecutor(SLOTS) as pool:
            outs = list(pool.map(one, schemas))
        return tally("llama.cpp server", schemas, outs, time.perf_counter() - t0, False, False)


def _line(r: Row, n: int) -> str:
    capped = "" if r.capped is None else str(r.capped)
    closed = "" if r.closed is None else str(r.closed)
    return (f"| {r.name} | {r.valid} ({100 * r.valid / n:.0f}%) | {r.invalid} | {r.length} | {r.mean_tokens:.0f} "
            f"| {capped} | {closed} | {r.wall_s:.0f} |")


def print_table(rows: list[Row], n: int, verbose: bool) -> None:
    print(f"\n{n} schemas, greedy, max {MAX_TOKENS} new tokens")
    print("| configuration | finished and valid | finished but invalid | `length` | mean tokens | capped values |"
          " closed at budget | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(_line(r, n))
    if verbose:
        for r in rows:
            for f in r.failures:
                print(f"  {r.name}: {f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF path (default: the bundled SmolLM2-135M)")
    ap.add_argument("--whitespace", default="standard", help="Engine json_whitespace (default: standard)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N schemas")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated subset of {CONFIGS}, run in the order given")
    ap.add_argument("--dry-default", type=float, default=0.8, help="dry_multiplier of +DRY and all")
    ap.add_argument("--dry", default="",
                    help="also run 'all' at each of these dry multipliers (comma-separated; M+nc: breakers \\n and :)")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-first", action="store_true", help="run llama.cpp's server before sglite")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    ap.add_argument("-v", "--verbose", action="store_true", help="print each unfinished or invalid output")
    args = ap.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown configs {unknown}; choose from {CONFIGS}")
    args.dry = [d for d in args.dry.split(",") if d]
    for d in args.dry:
        mult, *extras = d.split("+")
        try:
            float(mult)
        except ValueError:
            ap.error(f"--dry {d!r}: not a number")
        for extra in extras:
            if extra not in BREAKER_SETS and not (extra[:1] == "a" and extra[1:].isdigit()):
                ap.error(f"--dry {d!r}: {extra!r} is neither a breaker set {list(BREAKER_SETS)} nor aN")
    if not DATA.is_dir():
        ap.error(f"MaskBench data not found at {DATA}")

    from sglite.runtime.model_source import resolve_model_path
    gguf = resolve_model_path(args.model)
    args.model = str(gguf)
    names = SCHEMAS[:args.limit]
    schemas: list[dict[str, Any]] = [json.loads((DATA / n).read_text())["schema"] for n in names]
    print(f"model: {gguf.name}; whitespace: {args.whitespace}; threads: {args.threads}", flush=True)
    rows = []
    if not args.skip_llamacpp and args.llamacpp_first:
        rows.append(llamacpp_row(args, schemas, gguf))
        print(f"  {_line(rows[-1], len(schemas))}", flush=True)
    rows += sglite_rows(args, schemas) if args.configs or args.dry else []
    if not args.skip_llamacpp and not args.llamacpp_first:
        rows.append(llamacpp_row(args, schemas, gguf))
    print_table(rows, len(schemas), args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
