"""sglite beside llama.cpp on the CPU: same GGUF, same thread count, same run.

    bash bench/build_llamacpp.sh                   # once: llama-server + llama-bench into ~/.cache (~15 min)
    python bench/vs_llamacpp.py [--threads 2] [--limit N] [--weights int8] [--json-whitespace any]
    python bench/vs_llamacpp.py --skip-llamacpp --limit 3      # ours only
    python bench/vs_llamacpp.py --parts job                     # only the main job (--parts speed: only speed)

Prints the CPU's flags, model and torch version, then one table with ours beside llama.cpp's:
- decode tok/s at batch 1 and prefill tok/s of a 128-token prompt. llama.cpp: `llama-bench -p 128 -n 64`.
  sglite: `Engine.generate` on fresh random token ids with the prefix cache flushed, greedy, ignore_eos; decode
  = (completion_tokens - 1) / (e2e - ttft), since the first token comes out of the prefill (llama-bench's tg64
  likewise times 64 single-token steps); prefill = 128 / ttft of a 1-token generation. Medians of --reps runs.
- decode tok/s at batch 32 (sglite: 32 fresh prompts x 64 tokens, decode phase only). llama-bench runs one
  sequence, so llama.cpp has no number here.
- the main job: the bundled reports through the example program's `run_batch` (its `run_job`), and the same chat
  messages with the same JSON schema sent to `llama-server` (started here on 127.0.0.1, 8 slots, temperature 0,
  `response_format: json_schema` on /v1/chat/completions, 8 requests in flight); the server renders the
  messages with its own chat template for the GGUF (the script checks that it renders the same text as ours).
  For each: wall time, outputs that validate against the schema, and field accuracy against
  examples/data/reports_gold.jsonl (rules in bench/accuracy.py), per field and in total.

Engine options pass through: --weights (when the Engine has a weights= option), --json-whitespace, and any
`--engine-opt KEY=VALUE` (VALUE read as JSON when it parses). llama.cpp binaries are looked up in
$LLAMACPP_BIN_DIR (default ~/.cache/sglite/llama.cpp/bin) or --llamacpp-bin."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from accuracy import load_gold, print_accuracy_table, score, score_job  # noqa: E402

DEFAULT_BIN_DIR = Path(os.environ.get("LLAMACPP_BIN_DIR", Path.home() / ".cache/sglite/llama.cpp/bin"))
CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
SLOTS = 8


class JobResult(NamedTuple):
    wall_s: float
    records: dict[str, dict | None]   # report id -> parsed JSON object (None: no output or not JSON)
    valid: int                        # outputs that validate against the schema
    errors: dict[str, str]            # report id -> why it is not valid
    confidence: dict[str, dict] = {}  # report id -> {JSON pointer: confidence} (sglite only)


# --- machine -----------------------------------------------------------------------------------------------------
def machine_info() -> dict[str, str]:
    import torch

    model, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    return {"cpu": f"{model} ({os.cpu_count()} logical CPUs)",
            "flags": " ".join(f for f in CPU_FLAGS if f in flags) or "none of " + " ".join(CPU_FLAGS),
            "torch": f"{torch.__version__} (CPU capability {capability})"}


def load_example():
    path = ROOT / "examples" / "financial_report_extraction.py"
    spec = importlib.util.spec_from_file_location("financial_report_extraction", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # pydantic resolves the string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def chat_messages(example, report: str) -> list[dict]:
    """The example program's turns as OpenAI chat messages (the few-shot answers serialized as the program does)."""
    messages = [{"role": "system", "content": example.INSTRUCTIONS}]
    for text, record in example.FEW_SHOT:
        messages += [{"role": "user", "content": text},
                     {"role": "assistant", "content": json.dumps(record, ensure_ascii=False)}]
    return messages + [{"role": "user", "content": report}]


def check_output(raw: str | None, schema: dict) -> tuple[dict | None, str | None]:
    """(parsed record or None, why it is not valid or None), the checks run_job makes."""
    import jsonschema

    if raw is None:
        return None, "no output"
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as e:
        return None, f"JSONDecodeError: {e}"
    try:
        jsonschema.validate(record, schema)
    except jsonschema.ValidationError as e:
        return record if isinstance(record, dict) else None, f"ValidationError: {str(e).splitlines()[0]}"
    return record, None


# --- sglite ------------------------------------------------------------------------------------------------------
def engine_options(args) -> tuple[dict[str, Any], list[str]]:
    """Options for Engine(...) from the command line, and notes on the ones this Engine does not take."""
    import dataclasses
    import inspect

    from sglite.runtime.engine import Engine
    from sglite.runtime.engine.config import EngineConfig

    accepted = {f.name for f in dataclasses.fields(EngineConfig)}
    accepted |= set(inspect.signature(Engine.__init__).parameters) - {"self", "model", "options"}
    wanted: dict[str, Any] = {"num_threads": args.threads}
    if args.weights:
        wanted["weights"] = args.weights
    if args.json_whitespace:
        wanted["json_whitespace"] = args.json_whitespace
    for item in args.engine_opt:
        key, _, value = item.partition("=")
        try:
            wanted[key] = json.loads(value)
        except json.JSONDecodeError:
            wanted[key] = value
    notes = [f"this Engine has no {k}= option; --{k.replace('_', '-')} ignored" for k in wanted if k not in accepted]
    return {k: v for k, v in wanted.items() if k in accepted}, notes


class SgliteSide:
    def __init__(self, gguf: Path, options: dict[str, Any], seed: int = 0):
        from sglite.runtime.engine import Engine

        self.engine = Engine(str(gguf), **options)
        self.vocab = self.engine.model.config.vocab_size
        self.rng = random.Random(seed)
        self._generate([self._prompt(8)], 4)   # warm-up

    def _prompt(self, n: int) -> list[int]:
        return [self.rng.randrange(100, self.vocab - 100) for _ in range(n)]   # fresh ids: no prefix-cache hit

    def _generate(self, prompts: list[list[int]], new_tokens: int) -> list[dict]:
        self.engine.flush_cache()
        return self.engine.generate(input_ids=prompts, sampling_params={
            "max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True})

    def decode_b1(self, reps: int) -> float:
        rates = []
        for _ in range(reps):
            m = self._generate([self._prompt(8)], 64)[0]["meta_info"]
            rates.append((m["completion_tokens"] - 1) / (m["e2e_latency"] - m["ttft"]))
        return statistics.median(rates)

    def prefill(self, reps: int, n: int = 128) -> float:
        return statistics.median(n / self._generate([self._prompt(n)], 1)[0]["meta_info"]["ttft"]
                                 for _ in range(reps))

    def decode_batch(self, batch: int = 32, new_tokens: int = 64) -> float:
        self._generate([self._prompt(16) for _ in range(batch)], 2)   # warm-up at this batch size
        metas = [o["meta_info"] for o in self._generate([self._prompt(16) for _ in range(batch)], new_tokens)]
        decode_s = max(m["e2e_latency"] for m in metas) - max(m["ttft"] for m in metas)
        return sum(m["completion_tokens"] - 1 for m in metas) / decode_s

    def main_job(self, example, docs: list[dict], grounded: bool = True) -> JobResult:
        """The example's run_job (its grounded fields unless `grounded` is False)."""
        import sglite as sgl

        runtime = sgl.Runtime(engine=self.engine)
        self.engine.flush_cache()
        job = example.run_job(docs, runtime, progress_bar=False, grounded=grounded)
        results = job["results"]
        return JobResult(job["elapsed_s"], {r["id"]: r["record"] for r in results}, job["valid"],
                         {r["id"]: r["error"] for r in results if not r["valid"]},
                         {r["id"]: r["confidence"] for r in results if r.get("confidence")})

    def render(self, messages: list[dict]) -> str:
        return self.engine.tokenizer.apply_chat_template(messages)

    def shutdown(self) -> None:
        self.engine.shutdown()


# --- llama.cpp ---------------------------------------------------------------------------------------------------
def find_binaries(bin_dir: Path) -> dict[str, Path]:
    exes = {name: bin_dir / name for name in ("llama-bench", "llama-server")}
    missing = [str(p) for p in exes.values() if not os.access(p, os.X_OK)]
    if missing:
        raise SystemExit(f"error: llama.cpp binaries not found: {', '.join(missing)}\n"
                         f"build them with `bash bench/build_llamacpp.sh` (about 15 minutes on 2 cores), set "
                         f"LLAMACPP_BIN_DIR or --llamacpp-bin to where they are, or pass --skip-llamacpp")
    return exes


def llama_bench(exe: Path, gguf: Path, threads: int, reps: int) -> dict[str, float]:
    out = subprocess.run([str(exe), "-m", str(gguf), "-t", str(threads), "-p", "128", "-n", "64",
                          "-r", str(reps), "-o", "json"], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({out.returncode}): {out.stderr[-2000:]}")
    rows = json.loads(out.stdout)
    rates = {}
    for row in rows:
        if row["n_prompt"] == 128 and row["n_gen"] == 0:
            rates["prefill"] = row["avg_ts"]
        elif row["n_prompt"] == 0 and row["n_gen"] == 64:
            rates["decode_b1"] = row["avg_ts"]
    return rates


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-server on 127.0.0.1 (a free port) for the life of a `with` block; its log goes to a temp file."""

    def __init__(self, exe: Path, gguf: Path, threads: int, ctx_per_slot: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(exe), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port), "-t", str(threads),
                    "-tb", str(threads), "-np", str(SLOTS), "-c", str(SLOTS * ctx_per_slot)]

    def __enter__(self) -> "LlamaServer":
        import httpx

        self.log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.url, timeout=900)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if self.client.get("/health").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"llama-server did not come up ({' '.join(self.cmd)}); log {self.log.name}:\n"
                           + Path(self.log.name).read_text()[-3000:])

    def __exit__(self, *exc: Any) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def render(self, messages: list[dict]) -> str:
        r = self.client.post("/apply-template", json={"messages": messages})
        r.raise_for_status()
        return r.json()["prompt"]

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` as the server tokenizes a chat prompt: special tokens parsed, BOS where the GGUF
        asks for one."""
        r = self.client.post("/tokenize", json={"content": text, "add_special": True, "parse_special": True})
        r.raise_for_status()
        return r.json()["tokens"]

    def chat(self, messages: list[dict], schema: dict) -> str | None:
        r = self.client.post("/v1/chat/completions", json={
            "messages": messages, "temperature": 0, "max_tokens": 512, "seed": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "FinancialReport", "schema": schema}}})
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        return r.json()["choices"][0]["message"]["content"]

    def main_job(self, example, docs: list[dict]) -> JobResult:
        schema = example.FinancialReport.model_json_schema()

        def one(doc: dict) -> tuple[str | None, str | None]:
            try:
                return self.chat(chat_messages(example, doc["text"]), schema), None
            except Exception as e:  # noqa: BLE001 - one failed request is one invalid output, not a failed run
                return None, f"{type(e).__name__}: {e}"

        t0 = time.perf_counter()
        with ThreadPoolExecutor(SLOTS) as pool:
            outs = list(pool.map(one, docs))
        wall = time.perf_counter() - t0
        records, errors = {}, {}
        for doc, (raw, err) in zip(docs, outs):
            record, why = check_output(raw, schema) if err is None else (None, err)
            records[doc["id"]] = record
            if why:
                errors[doc["id"]] = why
        return JobResult(wall, records, len(docs) - len(errors), errors)


# --- report ------------------------------------------------------------------------------------------------------
def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def ratio(ours: float | None, theirs: float | None, higher_is_better: bool = True) -> str:
    if not ours or not theirs:
        return "–"
    return f"{(ours / theirs if higher_is_better else theirs / ours):.2f}x"


def print_report(rows: list[tuple[str, str, str, str]]) -> None:
    print("| | llama.cpp | sglite | sglite vs llama.cpp |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2 Q4_1)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both (torch num_threads, llama.cpp -t)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N reports")
    ap.add_argument("--parts", default="speed,job", help="comma list of: speed, job")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each speed measurement")
    ap.add_argument("--skip-llamacpp", action="store_true", help="run sglite only")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    ap.add_argument("--ctx-per-slot", type=int, default=2048, help="llama-server context per slot (-c = 8x this)")
    ap.add_argument("--weights", default=None, help="Engine(weights=...) when the Engine has that option")
    ap.add_argument("--json-whitespace", default=None, help="Engine(json_whitespace=...)")
    ap.add_argument("--engine-opt", action="append", default=[], metavar="KEY=VALUE", help="any other Engine option")
    ap.add_argument("--dump", type=Path, default=None, help="write every record with its per-field scores (JSONL)")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts <= {"speed", "job"}:
        ap.error(f"--parts takes speed and/or job, got {args.parts!r}")
    exes = None if args.skip_llamacpp else find_binaries(args.llamacpp_bin)   # fail before any work

    from sglite.runtime.model_source import resolve_model_path

    gguf = resolve_model_path(args.model)
    example = load_example()
    docs = example.load_reports(ROOT / "examples" / "data" / "reports.jsonl", args.limit)
    gold = load_gold()
    options, notes = engine_options(args)
    info = machine_info()
    print(f"CPU: {info['cpu']}\nCPU flags: {info['flags']}\ntorch: {info['torch']}\nmodel: {gguf.name}\n"
          f"threads: {args.threads} for both; sglite Engine options: {options}")
    if exes:
        version = args.llamacpp_bin / "VERSION"
        print(f"llama.cpp: {version.read_text().strip() if version.exists() else args.llamacpp_bin}")
    for note in notes:
        print(f"note: {note}")
    load = os.getloadavg()[0]
    print(f"load average before the run: {load:.2f}")
    if load > 0.5:
        print("note: other processes are using the CPU; llama.cpp's threads spin at each barrier and lose the "
              "most when a core is taken (compare `llama-bench -t 1,2`), so rerun on a quiet machine to compare")

    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    side = SgliteSide(gguf, options)
    try:
        if "speed" in parts:
            print("\nsglite: speed ...", file=sys.stderr, flush=True)
            ours["decode_b1"] = side.decode_b1(args.reps)
            ours["prefill"] = side.prefill(args.reps)
            ours["decode_b32"] = side.decode_batch(32, 64)
        if "job" in parts:
            print(f"sglite: main job ({len(docs)} reports) ...", file=sys.stderr, flush=True)
            ours["job"] = side.main_job(example, docs)
            ours_prompt = side.render(chat_messages(example, docs[0]["text"]))   # the speed part needs no chat
                                                                                 # template (base models)
            ours_ids = side.engine.tokenizer.encode(ours_prompt)
    finally:
        side.shutdown()

    if exes:
        if "speed" in parts:
            print("llama.cpp: llama-bench ...", file=sys.stderr, flush=True)
            theirs.update(llama_bench(exes["llama-bench"], gguf, args.threads, args.reps))
        if "job" in parts:
            print(f"llama.cpp: main job on llama-server ({len(docs)} reports) ...", file=sys.stderr, flush=True)
            with LlamaServer(exes["llama-server"], gguf, args.threads, args.ctx_per_slot) as server:
                same = server.render(chat_messages(example, docs[0]["text"])) == ours_prompt
                print(f"chat template: llama-server renders {'the same' if same else 'a DIFFERENT'} prompt text "
                      "as sglite's tokenizer for the same messages")
                same_ids = server.tokenize(ours_prompt) == ours_ids
                print(f"prompt tokens: llama-server tokenizes that text (BOS as its GGUF says) to "
                      f"{'the same' if same_ids else 'DIFFERENT'} token ids as sglite")
                theirs["job"] = server.main_job(example, docs)

    rows = []
    if "speed" in parts:
        rows += [("decode tok/s, batch 1", fmt(theirs.get("decode_b1")), fmt(ours["decode_b1"]),
                  ratio(ours["decode_b1"], theirs.get("decode_b1"))),
                 ("prefill tok/s, 128 tokens", fmt(theirs.get("prefill")), fmt(ours["prefill"]),
                  ratio(ours["prefill"], theirs.get("prefill"))),
                 ("decode tok/s, batch 32 (64 tokens each)", "– (llama-bench: one sequence)",
                  fmt(ours["decode_b32"]), "–")]
    if "job" in parts:
        scores = {"sglite": score_job(ours["job"].records, gold)}
        if "job" in theirs:
            scores = {"llama.cpp": score_job(theirs["job"].records, gold), **scores}
        job_t, job_o = theirs.get("job"), ours["job"]
        acc = {name: f"{s['total'][0]}/{s['total'][1]}" for name, s in scores.items()}
        rows += [(f"main job ({len(docs)} reports), wall s", fmt(job_t and job_t.wall_s), fmt(job_o.wall_s),
                  ratio(job_o.wall_s, job_t and job_t.wall_s, higher_is_better=False)),
                 ("main job, outputs valid", f"{job_t.valid}/{len(docs)}" if job_t else "–",
                  f"{job_o.valid}/{len(docs)}", ""),
                 ("main job, gold fields right", acc.get("llama.cpp", "–"), acc["sglite"], "")]
    print(f"\nload average after the run: {os.getloadavg()[0]:.2f}\n")
    print_report(rows)
    if "job" in parts:
        print("\nfield accuracy against examples/data/reports_gold.jsonl (rules: bench/accuracy.py)\n")
        print_accuracy_table(scores)
        jobs = {"llama.cpp": theirs.get("job"), "sglite": ours["job"]}
        for name, job in jobs.items():
            for doc_id, why in (job.errors.items() if job else ()):
                print(f"{name} {doc_id} not valid: {why}")
        if args.dump:
            with open(args.dump, "w", encoding="utf-8") as f:
                for name, job in jobs.items():
                    for doc_id, record in (job.records.items() if job else ()):
                        f.write(json.dumps({"system": name, "id": doc_id, "record": record,
                                            "right": score(record, gold[doc_id])}, ensure_ascii=False) + "\n")
            print(f"records and scores written to {args.dump}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
