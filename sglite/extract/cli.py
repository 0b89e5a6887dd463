"""`sglite extract` / `python -m sglite.extract`: options, the checks before the model loads, the job, the
summary. Exit status: 0 every record validated, 1 some documents failed (their lines say why), 2 the job could
not start (one line on stderr says why), 130 interrupted (rerun with --resume)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..protocol import closed_schema, json_schema_text
from .errors import SetupError
from .inputs import Document, id_key, load_documents
from .job import JobSpec, Unfinished, run_documents, shared_prefix
from .output import ResultLog
from .preflight import check_enforceable, check_ray, check_server, load_schema
from .progress import Progress
from .summary import Summary


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglite extract", description="JSON-Schema extraction over documents: one "
                                 "output line per document, written as soon as it finishes")
    ap.add_argument("--schema", type=Path, required=True, help="JSON Schema file of one record")
    ap.add_argument("--prompt", type=Path, required=True, help="instructions file (may contain {text})")
    ap.add_argument("--input", nargs="+", required=True, metavar="PATH",
                    help="JSONL or CSV files, .txt/.md files, directories of .txt/.md files, or globs")
    ap.add_argument("--output", type=Path, required=True, help="JSONL results: {\"id\", \"record\"} per line")
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="skip the documents whose ids the output holds")
    again.add_argument("--overwrite", action="store_true", help="empty an existing output first")
    ap.add_argument("--text-field", "--text-column", dest="text_field", default="text",
                    help="JSONL field / CSV column holding the text (default: text)")
    ap.add_argument("--id-field", "--id-column", dest="id_field", default="id",
                    help="JSONL field / CSV column holding the id (default: id, else the line / row number)")
    ap.add_argument("--model", default=None, help="model path for the in-process engine (default model if unset)")
    ap.add_argument("--url", default=None, help="use a running sglite server instead of an in-process engine")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run on a Ray cluster, one engine per replica: ADDRESS is host:port, ray://host:port or "
                         "auto; without it, the local Ray (started if none runs). Needs pip install \"sglite[ray]\"")
    ap.add_argument("--replicas", type=int, default=None,
                    help="with --ray: engine replicas (default: fill the cluster, one per --num-threads CPUs, or "
                         "one per GPU on cuda)")
    ap.add_argument("--shard-size", type=int, default=None,
                    help="with --ray: documents sent to a replica at a time (default: the job split so each "
                         "replica holds two shards, at most 64 documents each)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--weights", default="auto",
                    help="weight format: auto (measured on this machine), fp32, bf16, int8, int4, int4+bf16")
    ap.add_argument("--num-threads", type=_positive, default=None,
                    help="CPU: torch threads (default: one per core; fewer on a shared machine); with --ray, per "
                         "replica, which declares as many CPUs to Ray (default 1)")
    ap.add_argument("--max-tokens", type=_positive, default=512, help="per record (default: 512)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--limit", type=_positive, default=None, help="only the first N documents")
    ap.add_argument("--allow-extra-keys", action="store_true",
                    help="let the model add keys the schema does not name (default: objects are closed while "
                         "generating, which keeps outputs short; validation uses the schema as given)")
    return ap


def main(argv: list[str] | None = None, backend: Any = None) -> int:
    """The CLI body; `backend` (tests, embedding) replaces the one the options would build (and is not shut
    down here)."""
    args = _parser().parse_args(argv)
    try:
        return _main(args, backend)
    except KeyboardInterrupt:   # while loading the model, say; the job itself reports how far it got
        print(f"\nsglite extract: interrupted; rerun with --resume to continue {args.output}", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace, backend: Any) -> int:
    # cheap checks first; lowering the schema imports torch (through the grammar package), about 2 s of CPU
    try:
        spec, docs = _prepare(args)
        if args.ray is not None and args.url:
            raise SetupError("--ray and --url both say where the model runs; give one")
        if args.ray is None and (args.replicas is not None or args.shard_size is not None):
            raise SetupError("--replicas and --shard-size go with --ray")
        if args.ray is not None and backend is None:
            check_ray(args.ray or None, args.replicas, args.shard_size)
        if args.url and backend is None:
            check_server(args.url)
        log = ResultLog.open(args.output, "resume" if args.resume else "overwrite" if args.overwrite else "new")
    except SetupError as e:
        return _fail(e)
    with log:
        try:
            check_enforceable(spec.schema_text, args.schema)
            log.begin()
        except SetupError as e:
            return _fail(e)
        if log.dropped_tail:
            print(f"sglite extract: {args.output} ended in a cut-off line ({log.dropped_tail} bytes); removed it, "
                  "its document runs again", file=sys.stderr)
        summary = Summary(spec.schema)
        todo = []
        for doc in docs:
            line = log.done.get(id_key(doc.id))
            if line is None:
                todo.append(doc)
            else:
                summary.add(line)
        if len(todo) < len(docs):
            print(f"sglite extract: {len(docs) - len(todo)} of {len(docs)} documents are already in {args.output}; "
                  f"running the other {len(todo)}", file=sys.stderr)
        if not todo:
            _report(summary, args.output, 0, 0.0, None)
            return 0 if summary.failed == 0 else 1
        own_backend = backend is None
        if own_backend:
            try:
                backend = _backend(args)
            except SetupError as e:
                return _fail(e)
        try:
            return _run(spec, todo, backend, log, summary, args.output)
        finally:
            if own_backend:
                backend.shutdown()


def _prepare(args: argparse.Namespace) -> tuple[JobSpec, list[Document]]:
    """The job from the files: the schema (valid JSON Schema), the prompt, the documents."""
    schema = load_schema(args.schema)
    try:
        instructions = args.prompt.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise SetupError(f"--prompt {args.prompt}: cannot read ({e})") from None
    docs = load_documents(args.input, args.text_field, args.id_field, args.limit)
    if not docs:
        raise SetupError("no documents in the input")
    out = args.output.resolve()
    for spec in args.input:
        if Path(spec).is_file() and Path(spec).resolve() == out:
            raise SetupError(f"--output {args.output} is also an input; write the results to another file")
    # the same conversion as gen(json_schema=Model): a schema file written from Model.model_json_schema()
    # gives the same text, hence the same grammar
    schema_text = json_schema_text(schema if args.allow_extra_keys else closed_schema(schema))
    return JobSpec(instructions, schema, schema_text, args.max_tokens, args.temperature), docs


def _backend(args: argparse.Namespace) -> Any:
    if args.ray is not None:
        return _ray_backend(args)
    if args.url:
        from ..backend.runtime_endpoint import RuntimeEndpoint
        return RuntimeEndpoint(args.url)
    from ..backend.runtime import Runtime
    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"sglite extract: loading the model on {device} ...", file=sys.stderr)
    try:
        return Runtime(args.model, device=device, weights=args.weights, num_threads=args.num_threads)
    except Exception as e:   # noqa: BLE001 - a model that does not load is a setup error, said in one line
        raise SetupError(f"cannot load the model {args.model or '(default)'}: {type(e).__name__}: {e}") from None


def _ray_backend(args: argparse.Namespace) -> Any:
    from ..backend.ray_runtime import RayRuntime
    from ..distributed.cluster import ClusterError
    from ..distributed.pool import ReplicaStartError

    count = f"{args.replicas} replicas" if args.replicas else "replicas to fill the cluster"
    print(f"sglite extract: starting {count} on {args.ray or 'the local Ray'} ...", file=sys.stderr)
    try:
        return RayRuntime(args.model, replicas=args.replicas, num_threads=args.num_threads or 1,
                          address=args.ray or None, shard_size=args.shard_size, device=args.device,
                          weights=args.weights).start()
    except (ClusterError, ReplicaStartError) as e:
        raise SetupError(f"--ray: {e}") from None


def _run(spec: JobSpec, todo: list[Document], backend: Any, log: ResultLog, summary: Summary,
         output: Path) -> int:
    usage0 = backend.usage.as_dict()
    t0 = time.perf_counter()
    prefix = shared_prefix(spec, todo, backend)
    progress = Progress(backend, spec, todo, prefix).start()
    written, unfinished = 0, []
    try:
        remote = getattr(backend, "run_documents", None)   # a backend that runs whole documents (RayRuntime)
        lines = remote(spec, todo, prefix) if remote is not None else run_documents(spec, todo, backend, prefix)
        for line in lines:
            progress.doc_done()
            if isinstance(line, Unfinished):
                unfinished.append(line)
                continue
            log.append(line)
            summary.add(line)
            written += 1
    except KeyboardInterrupt:
        progress.close()
        print(f"\nsglite extract: interrupted; {written} of {len(todo)} documents finished and are in {output}: "
              "rerun with --resume to do the rest", file=sys.stderr)
        return 130
    finally:
        progress.close()
    usage = {k: v - usage0[k] for k, v in backend.usage.as_dict().items() if k != "cache_hit_rate"}
    _report(summary, output, written, time.perf_counter() - t0, usage)
    if unfinished:
        print(f"{len(unfinished)} documents did not run and are not in the output ({unfinished[0].why}); fix "
              "that, then rerun with --resume", file=sys.stderr)
    return 0 if summary.failed == 0 and not unfinished else 1


def _report(summary: Summary, output: Path, ran: int, elapsed: float, usage: dict | None) -> None:
    if usage is not None:
        hit = usage["cached_tokens"] / usage["prompt_tokens"] if usage["prompt_tokens"] else 0.0
        print(f"{ran} documents in {elapsed:.1f} s ({ran / elapsed:.2f} docs/s, "
              f"{usage['completion_tokens'] / elapsed:.0f} output tokens/s); prefix cache hit rate {hit:.1%}")
    resumed = summary.lines - ran
    print(f"{summary.valid}/{summary.lines} validated" + (f" ({resumed} from an earlier run)" if resumed else "")
          + (f"; {summary.failed} failed: their lines hold \"error\" and \"raw\"" if summary.failed else ""))
    table = summary.table()
    if table:
        print(table)
    print(f"wrote {output}")


def _fail(e: SetupError) -> int:
    print(f"sglite extract: {e}", file=sys.stderr)
    return 2
