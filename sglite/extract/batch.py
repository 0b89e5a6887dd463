"""`sglite batch INPUT.jsonl -o OUTPUT.jsonl`: an OpenAI batch file run on sglite.

Input lines are OpenAI's (and vLLM's `run_batch`'s): `{"custom_id", "method": "POST", "url", "body"}` with url
`/v1/chat/completions` or `/v1/completions`; each body is what that route takes (its own `response_format`,
`tools`, sampling parameters). Output lines are OpenAI's batch output, appended in completion order:

    {"id": "batch_req_...", "custom_id": ..., "response": {"status_code": 200, "request_id": ..., "body": {...}},
     "error": null}

A request the server refuses (a 4xx: a bad schema, a prompt over the context) is a line with that status and the
error body, as OpenAI writes it. The bodies are parsed and answered by the server's own code (sglite/server:
the same pydantic bodies, handlers and response formats as `sglite serve`), in process through ASGI, with --url
over HTTP to a running server, or with --ray by Ray replicas, each running that app around its own engine
(sglite.distributed: a lost replica's requests go to another one).

The guarantees of `sglite extract`: every line and body is checked before the model loads (exit 2 naming the
line); each output line is appended whole the moment its request finishes, so a crash loses nothing written;
`--resume` skips the custom_ids the output holds and runs the weight plan the job started with (recorded in
OUTPUT.job.json, as sglite extract records it; an explicit --weights naming another plan is refused); a request
the service could not answer (the server gone, a 503) writes no line and runs again on --resume. Exit status: 0
every request answered 2xx, 1 some answered 4xx/5xx, 2 bad input, 3 the output could not be written, 130 / 143
interrupted (rerun with --resume)."""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .batch_lines import Unanswered, asgi_client, load_requests, run_requests
from .cli import BUDGET_HELP, _ray_backend, engine_extras, seconds
from .jobfile import job_weights, record_plan
from .output import ResultLog
from .setup_error import SetupError
from .stopping import (EXIT_WRITE_FAILED, WriteFailed, append_line, install_sigterm, interrupted_status,
                       stopped_by)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglite batch", description="run an OpenAI batch file (chat and text "
                                 "completions) on sglite; output in OpenAI's batch output format")
    ap.add_argument("input", type=Path, metavar="INPUT.jsonl")
    ap.add_argument("-o", "--output", type=Path, required=True, metavar="OUTPUT.jsonl")
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="skip the custom_ids the output holds")
    again.add_argument("--overwrite", action="store_true", help="empty an existing output first")
    ap.add_argument("--url", default=None, help="a running sglite (or OpenAI-compatible) server to send to")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="answer on a Ray cluster, one engine per replica, as sglite extract --ray (ADDRESS: "
                         "host:port, ray://host:port or auto; without it the local Ray)")
    ap.add_argument("--replicas", type=int, default=None, help="with --ray: engine replicas (default: fill the "
                    "cluster)")
    ap.add_argument("--shard-size", type=int, default=None, help="with --ray: requests sent to a replica at a "
                    "time")
    ap.add_argument("--model", default=None, help="model path for the in-process engine (default model if unset)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--weights", default="auto", help="as in sglite extract")
    ap.add_argument("--num-threads", type=int, default=None)
    ap.add_argument("--grammar-compile-budget", dest="grammar_compile_budget_s", type=seconds, default=None,
                    metavar="SECONDS", help=BUDGET_HELP.replace("schema's grammar", "grammar of a body's "
                                                                "response_format or tools"))
    ap.add_argument("--max-in-flight", type=int, default=64, help="requests sent at a time (default 64)")
    return ap


def main(argv: list[str] | None = None, engine: Any = None) -> int:
    """The CLI body; `engine` (tests, embedding) replaces the in-process one the options would build."""
    args = _parser().parse_args(argv)
    try:
        if args.ray is not None and args.url:
            raise SetupError("--ray and --url both say where the model runs; give one")
        if args.ray is None and (args.replicas is not None or args.shard_size is not None):
            raise SetupError("--replicas and --shard-size go with --ray")
        engine_extras(args)
        if args.max_in_flight < 1:
            raise SetupError(f"--max-in-flight must be >= 1, got {args.max_in_flight}")
        if args.output.resolve() == args.input.resolve():
            raise SetupError(f"--output {args.output} is the input; write the results to another file")
        requests = load_requests(args.input)
        if args.url and engine is None:
            from .preflight import check_server
            check_server(args.url)
        if args.ray is not None and engine is None:
            from .preflight import check_ray
            check_ray(args.ray or None, args.replicas, args.shard_size)
        log = ResultLog.open(args.output, "resume" if args.resume else "overwrite" if args.overwrite else "new")
        recorded, args.weights = job_weights(args.output, args.resume, args.weights, remote=bool(args.url))
        done = {line.get("custom_id") for line in log.done.values()}
        log.begin()
    except SetupError as e:
        print(f"sglite batch: {e}", file=sys.stderr)
        return 2
    todo = [r for r in requests if r.custom_id not in done]
    if len(todo) < len(requests):
        print(f"sglite batch: {len(requests) - len(todo)} of {len(requests)} requests are already in "
              f"{args.output}; running the other {len(todo)}", file=sys.stderr)
    old = install_sigterm()
    written, failed, unanswered = 0, 0, []
    own = None
    try:
        with log:
            if not todo:
                return 0
            if engine is None and args.ray is not None:
                own = _ray(args)
            elif engine is None and not args.url:
                own = engine = _engine(args)
            record_plan(own or engine, recorded, args.output)
            t0 = time.perf_counter()

            def take(line: dict[str, Any] | Unanswered) -> None:
                nonlocal written, failed
                if isinstance(line, Unanswered):
                    unanswered.append(line)
                    return
                append_line(log, line)
                written += 1
                failed += line["response"] is None or not 200 <= line["response"]["status_code"] < 300

            async def go() -> None:
                async with _client(args.url, engine) as client:
                    async for line in run_requests(client, todo, args.max_in_flight, drop_model=not args.url):
                        take(line)
            if engine is None and args.ray is not None:
                from ..distributed.jobs import batch_requests
                for line in batch_requests(own.dispatcher, todo, args.max_in_flight):
                    take(line)
            else:
                asyncio.run(go())
            elapsed = time.perf_counter() - t0
    except KeyboardInterrupt as e:
        print(f"\nsglite batch: {stopped_by(e)}; {written} of {len(todo)} requests finished and are in "
              f"{args.output}: rerun with --resume to do the rest", file=sys.stderr)
        return interrupted_status(e)
    except WriteFailed as e:
        print(f"sglite batch: cannot write {args.output} ({e}); the {written} requests before it are there: fix "
              "that, then rerun with --resume", file=sys.stderr)
        return EXIT_WRITE_FAILED
    except SetupError as e:
        print(f"sglite batch: {e}", file=sys.stderr)
        return 2
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        if own is not None:
            own.shutdown()
    print(f"{written} requests in {elapsed:.1f} s; {written - failed} answered 2xx"
          + (f", {failed} refused (their lines hold the status and error)" if failed else "")
          + f"; wrote {args.output}")
    if unanswered:
        print(f"{len(unanswered)} requests got no answer and are not in the output ({unanswered[0].why}); fix "
              "that, then rerun with --resume", file=sys.stderr)
    return 0 if not failed and not unanswered else 1


def _engine(args: argparse.Namespace) -> Any:
    from ..runtime.engine.engine import Engine

    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"sglite batch: loading the model on {device} ...", file=sys.stderr)
    try:
        return Engine(args.model, device=device, weights=args.weights, num_threads=args.num_threads,
                      background=True, **engine_extras(args))
    except Exception as e:   # noqa: BLE001 - a model that does not load is a setup error, said in one line
        raise SetupError(f"cannot load the model {args.model or '(default)'}: {type(e).__name__}: {e}") from None


def _ray(args: argparse.Namespace) -> Any:
    """Started replicas (a RayRuntime) on the cluster --ray names."""
    return _ray_backend(args, "batch")


def _client(url: str | None, engine: Any) -> Any:
    """An httpx.AsyncClient at the server: `url`, or the server's app around `engine` in this process."""
    import httpx

    if url:
        return httpx.AsyncClient(base_url=url.rstrip("/"))
    return asgi_client(engine)
