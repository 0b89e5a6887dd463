"""Load test of the HTTP server (loopback only, bounded): N concurrent streaming chat requests with mixed prompt
and output lengths, some abandoned mid-stream by their client, a few invalid (they must get a 400). Checks: no
5xx, every request read to the end is complete (a finish_reason, `data: [DONE]`, usage in bounds), and afterwards
the engine is idle and the KV pool is back to its idle size (nothing leaked). Prints requests/s and TTFT percentiles.

    python bench/serve_load.py                      # starts `sglite serve --tiny` on a free loopback port
    python bench/serve_load.py --model default      # the real default model (SmolLM2-135M-Instruct); or a path
    python bench/serve_load.py --url http://127.0.0.1:30000   # an already running server
    python bench/serve_load.py --model default --pathological --server-args "--num-threads 1"

`--pathological`: two scenarios, one after the other on the same server. In each, plain chat requests one at a time,
alone and then beside pathological ones sent together:
  - "8 pathological": a chat whose response_format asks for an array of minItems 1000000007, /generate with regex
    b{0,6000}, and six of the constraints below (the counted repetitions, minItems 10**9); the target
    names eight;
  - "18 pathological": seven such chats (minItems 1000000007 + i), /generate with regex b{0,6000}, and every
    regex and schema whose compile used to run for tens of seconds (counted repetitions, minItems 10**9,
    maximum 10**1000, anyOf nested 16 deep, an enum of 10,000 strings, a GBNF of 2,000 alternatives).
The second scenario's numbers and words are shifted by 100, so it finds no grammar the first one compiled.
Prints, per scenario, the plain requests' latency (p50/p95) alone and beside the pathological ones with the
target computed from the same run (p95 beside <= 2 x p95 alone + 1 s), each pathological request's status and
time (200 or 400 within 5 s is the target), and the server's memory before and after (back within 300 MB).

No peer column: there is no SGLang/vLLM server on this machine to run the same load against.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx

WORDS = ("alpha beta gamma delta river mountain cloud stone paper light shadow north south engine garden "
         "window number letter story music").split()

SHARED_PROMPTS = ("Tell me about the river.", "Tell me about the mountain.", " ".join(WORDS * 4))


@dataclass
class Outcome:
    status: int = 0
    ttft: float | None = None
    latency: float = 0.0
    aborted: bool = False          # the client hung up on purpose
    bad: bool = False              # an invalid request (complete = it got its 400)
    complete: bool = False         # finish_reason + [DONE] + usage consistent
    tokens: int = 0
    error: str = ""


@dataclass
class LoadReport:
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0
    leaked_slots: float | None = None      # in use but owned by no request and not by the prefix cache
    used_after_flush: float | None = None  # in use after a flush, beyond the idle pool (0 expected)
    idle: bool = False

    @property
    def server_errors(self) -> int:
        return sum(o.status >= 500 for o in self.outcomes)

    @property
    def finished(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.aborted and not o.bad]

    @property
    def bad(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.bad]

    @property
    def incomplete(self) -> list[Outcome]:
        return [o for o in self.finished + self.bad if not o.complete]

    def percentile(self, q: float) -> float:
        ttfts = sorted(o.ttft for o in self.outcomes if o.ttft is not None)
        if not ttfts:
            return float("nan")
        return ttfts[min(len(ttfts) - 1, int(round(q / 100 * (len(ttfts) - 1))))]

    @property
    def ok(self) -> bool:
        return (not self.server_errors and not self.incomplete and self.idle and self.leaked_slots == 0
                and self.used_after_flush == 0)

    def table(self, label: str) -> str:
        done = self.finished
        toks = sum(o.tokens for o in self.outcomes)
        rows = [
            ("model", label),
            ("requests (finished / aborted / invalid)", f"{len(self.outcomes)} ({len(done)} / "
                                                        f"{sum(o.aborted for o in self.outcomes)} / {len(self.bad)})"),
            ("5xx responses", str(self.server_errors)),
            ("incomplete responses (or invalid without 400)", str(len(self.incomplete))),
            ("wall time (s)", f"{self.wall_s:.2f}"),
            ("requests/s", f"{len(self.outcomes) / self.wall_s:.2f}"),
            ("output tokens/s", f"{toks / self.wall_s:.1f}"),
            ("TTFT p50 (ms)", f"{1000 * self.percentile(50):.1f}"),
            ("TTFT p99 (ms)", f"{1000 * self.percentile(99):.1f}"),
            ("engine idle afterwards", str(self.idle)),
            ("KV slots leaked (idle, outside the cache)", str(self.leaked_slots)),
            ("KV slots in use after flush", str(self.used_after_flush)),
        ]
        w, v_w = max(len(k) for k, _ in rows), max(len(v) for _, v in rows)
        return "\n".join(f"| {k:<{w}} | {v:>{v_w}} |" for k, v in rows)


async def one_request(client: httpx.AsyncClient, rng: random.Random, abort: bool, model: str,
                      bad: bool = False) -> Outcome:
    if rng.random() < 0.3:  # repeated prompts: the prefix cache sees exact and partial duplicates
        prompt = SHARED_PROMPTS[rng.randrange(len(SHARED_PROMPTS))]
    else:
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.choice([4, 16, 64, 200])))
    max_tokens = rng.choice([4, 16, 48, 96])
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 1.0, "stream": True, "stream_options": {"include_usage": True},
            "seed": rng.randrange(1 << 30)}
    if bad:  # an invalid request among the good ones: must get its 400 and disturb nobody
        body["temperature"] = -1.0
        r = await client.post("/v1/chat/completions", json=body)
        return Outcome(status=r.status_code, bad=True, complete=r.status_code == 400,
                       error="" if r.status_code == 400 else r.text[:200])
    out, t0 = Outcome(aborted=abort), time.perf_counter()
    stop_after = rng.randint(1, 4) if abort else None
    finish, done, usage, chunks = None, False, None, 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            out.status = r.status_code
            if r.status_code != 200:
                out.error = (await r.aread()).decode()[:200]
                return out
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    out.error = event["error"]["message"]
                    break
                usage = event.get("usage") or usage
                for c in event.get("choices", []):
                    if c["delta"].get("content"):
                        if out.ttft is None:
                            out.ttft = time.perf_counter() - t0
                        chunks += 1
                    finish = c.get("finish_reason") or finish
                if stop_after is not None and chunks >= stop_after:
                    break  # hang up: leaving the `async with` closes the connection
    except httpx.HTTPError as e:
        out.error = f"{type(e).__name__}: {e}"
        out.status = out.status or 599
    out.latency = time.perf_counter() - t0
    if usage:
        out.tokens = usage["completion_tokens"]
    out.complete = bool(done and finish in ("stop", "length") and usage
                        and 0 < usage["completion_tokens"] <= max_tokens)
    return out


def scrape(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def wait_idle(url: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = scrape(url)
        if (m.get("sglite_num_running_requests", 0) + m.get("sglite_num_queue_requests", 0)
                + m.get("sglite_num_inflight_requests", 0)) == 0:
            return True
        time.sleep(0.1)
    return False


def slots_outside_cache(url: str) -> float:
    """KV slots in use that the prefix cache does not own. With no request running this must be 0: anything
    else leaked. (Checked before a flush, since a flush resets the whole allocator and would hide a leak.)"""
    m = scrape(url)
    return m.get("sglite_kv_pool_used_slots", float("nan")) - m.get("sglite_kv_pool_cached_slots", 0.0)


def pool_used_after_flush(url: str) -> float:
    httpx.post(url + "/flush_cache", timeout=30).raise_for_status()
    return scrape(url).get("sglite_kv_pool_used_slots", float("nan"))


async def run_load(url: str, num_requests: int = 200, concurrency: int = 200, abort_fraction: float = 0.1,
                   seed: int = 0, model: str = "default", bad_fraction: float = 0.05) -> LoadReport:
    if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the load test only targets loopback servers, got {url}")
    rng = random.Random(seed)
    wait_idle(url)
    idle_used = pool_used_after_flush(url)
    report = LoadReport()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(600, connect=60)) as client:
        async def bounded(i: int) -> Outcome:
            async with sem:
                r = rng.random()
                return await one_request(client, random.Random(rng.random()), r < abort_fraction, model,
                                         bad=abort_fraction <= r < abort_fraction + bad_fraction)
        t0 = time.perf_counter()
        report.outcomes = await asyncio.gather(*(bounded(i) for i in range(num_requests)))
        report.wall_s = time.perf_counter() - t0
    report.idle = wait_idle(url)
    report.leaked_slots = slots_outside_cache(url)
    report.used_after_flush = pool_used_after_flush(url) - idle_used
    return report


def pathological_requests(count: int = 18, salt: int = 0) -> list[tuple[str, dict]]:
    """(route, body) of requests whose grammar would stall a server that compiled without budgets: 18 (seven
    chats, then /generate ones), or 8 (one chat, then the first seven /generate ones). `salt` shifts their numbers,
    so that each scenario compiles grammars of its own."""
    chats = 7 if count == 18 else 1
    if count not in (8, 18):
        raise ValueError(f"the pathological scenarios have 8 or 18 requests, not {count}")
    reqs = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "List numbers."}], "max_tokens": 8,
                                      "response_format": {"type": "json_schema", "json_schema": {
                                          "name": "a", "schema": {"type": "array",
                                                                  "minItems": 1000000007 + salt + i}}}})
            for i in range(chats)]
    gen = {"text": "Say b:", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}

    def with_(**kw) -> dict:
        return {**gen, "sampling_params": {**gen["sampling_params"], **kw}}
    nested: dict = {"type": "integer"}
    for _ in range(16):
        nested = {"anyOf": [nested, {"type": "string"}]}
    reqs += [("/generate", with_(regex=r)) for r in
             ["b{0,6000}", "a{0,5000}", "a{0,20000}", "a{0,100000}", r"[\s\S]{0,100000}", "(a{1,100}){1,100}"]]
    reqs += [("/generate", with_(json_schema=json.dumps(s))) for s in
             [{"type": "array", "minItems": 10 ** 9 + salt}, {"type": "integer", "maximum": 10 ** 1000 + salt},
              nested, {"enum": [f"word{i + salt}" for i in range(10_000)]}]]
    reqs.append(("/generate", with_(ebnf="root ::= " + " | ".join(f'"w{i + salt}"' for i in range(2000)))))
    return reqs[:count]


def _label(route: str, body: dict) -> str:
    """A short name for a pathological request: its route and constraint."""
    if "response_format" in body:
        return f"chat, array minItems {body['response_format']['json_schema']['schema']['minItems']}"
    sp = body["sampling_params"]
    for key in ("regex", "json_schema", "ebnf"):
        if key in sp:
            return f"/generate {key} {sp[key][:40]}" + (f"... ({len(sp[key])} chars)" if len(sp[key]) > 40 else "")
    return route


def _rss_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def _plain(client: httpx.AsyncClient, model: str, i: int) -> float:
    t0 = time.perf_counter()
    r = await client.post("/v1/chat/completions", json={
        "model": model, "messages": [{"role": "user", "content": f"Name a colour ({i})."}], "max_tokens": 16,
        "temperature": 0})
    r.raise_for_status()
    return time.perf_counter() - t0


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


@dataclass
class Scenario:
    name: str
    alone: list[float]
    beside: list[float]
    answers: list[tuple[str, int, float]]
    rss: tuple[float, float]

    @property
    def target(self) -> float:
        return 2 * _pct(self.alone, 95) + 1.0

    @property
    def met(self) -> bool:
        return _pct(self.beside, 95) <= self.target

    @property
    def answered(self) -> bool:
        return all(s in (200, 400) and t <= 5.0 for _, s, t in self.answers)

    @property
    def memory_ok(self) -> bool:
        return not self.rss[1] - self.rss[0] > 300


async def run_pathological(url: str, model: str, pid: int | None, plain: int = 6) -> int:
    scenarios = [await _scenario(url, model, pid, count, salt, plain) for count, salt in ((8, 0), (18, 100))]
    print("| scenario | plain alone p50 / p95 (s) | plain beside p50 / p95 (s) | target: 2 x p95 alone + 1 (s) "
          "| target | pathological answered (200/400) within 5 s | RSS before -> after (MB) |\n"
          "|---|---|---|---|---|---|---|")
    for sc in scenarios:
        print(f"| {sc.name} | {_pct(sc.alone, 50):.2f} / {_pct(sc.alone, 95):.2f} | {_pct(sc.beside, 50):.2f} / "
              f"{_pct(sc.beside, 95):.2f} | {sc.target:.2f} | {'met' if sc.met else 'MISSED'} | "
              f"{'yes' if sc.answered else 'NO'} | {sc.rss[0]:.0f} -> {sc.rss[1]:.0f} |")
    for sc in scenarios:
        print(f"\n{sc.name}: plain latencies alone {_fmt(sc.alone)}, beside {_fmt(sc.beside)}\n"
              "| pathological request | status | seconds |\n|---|---|---|")
        for name, status, secs in sc.answers:
            print(f"| {name} | {status} | {secs:.2f} |")
    return 0 if all(sc.met and sc.answered and sc.memory_ok for sc in scenarios) else 1


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


async def _scenario(url: str, model: str, pid: int | None, count: int, salt: int, plain: int) -> Scenario:
    """Plain requests alone, then beside `count` pathological ones sent together (the first plain one 0.2 s
    after them)."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120, connect=60)) as client:
        await _plain(client, model, -1)      # warm up
        alone = [await _plain(client, model, i) for i in range(plain)]
        rss0 = _rss_mb(pid)

        async def bad(route: str, body: dict) -> tuple[str, int, float]:
            t0 = time.perf_counter()
            try:
                r = await client.post(route, json={**body, "model": model} if route.startswith("/v1") else body)
                status = r.status_code
            except httpx.HTTPError:
                status = 599
            return _label(route, body), status, time.perf_counter() - t0
        wave = asyncio.gather(*(bad(r, b) for r, b in pathological_requests(count, salt)))
        await asyncio.sleep(0.2)
        beside = [await _plain(client, model, i) for i in range(plain)]
        answers = await wave
    wait_idle(url)
    return Scenario(f"{count} pathological", alone, beside, answers, (rss0, _rss_mb(pid)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(extra: list[str], port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sglite.launch_server", "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {' '.join(cmd)}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not come up within 600 s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="an already running loopback server (default: start one)")
    p.add_argument("--model", help="model for the server this script starts: a path, or 'default' for "
                   "SmolLM2-135M-Instruct (default: the tiny random model)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--abort-fraction", type=float, default=0.1, help="clients that hang up mid-stream")
    p.add_argument("--bad-fraction", type=float, default=0.05, help="invalid requests (expect 400)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-running-requests", type=int, default=64)
    p.add_argument("--pathological", action="store_true",
                   help="the pathological-request scenario (see above) instead of the load test")
    p.add_argument("--server-args", default="", help="more `sglite serve` options, e.g. '--schedule-policy fcfs'")
    args = p.parse_args(argv)

    proc = None
    url = args.url
    if url is None:
        port = _free_port()
        extra = ["--tiny"] if not args.model else [] if args.model == "default" else ["--model", args.model]
        extra += ["--max-running-requests", str(args.max_running_requests), *shlex.split(args.server_args)]
        proc = start_server(extra, port)
        url = f"http://127.0.0.1:{port}"
    try:
        model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
        if args.pathological:
            return asyncio.run(run_pathological(url, model, proc.pid if proc is not None else None))
        report = asyncio.run(run_load(url, args.requests, args.concurrency, args.abort_fraction, args.seed, model,
                                      args.bad_fraction))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    print(report.table(model))
    for o in report.outcomes:
        if o.status >= 500 or (not o.aborted and not o.complete):  # includes invalid requests not given a 400
            print(f"  failed: status={o.status} error={o.error!r}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
