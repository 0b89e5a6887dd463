"""`sglite extract` / `python -m sglite.extract`: options, the checks before the model loads, the job (run by
api.Extraction, the same job as the Python API's), the summary. Exit status: 0 every record validated, 1 some
documents failed (their lines say why), 2 the job could not start (one line on stderr says why), 3 the output
could not be written (a full disk, say: free space, then rerun with --resume), 130 interrupted by Ctrl-C and 143
by SIGTERM (rerun with --resume)."""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .api import Extraction, has_chat_template, job_spec
from .setup_error import SetupError
from .inputs import Document, id_key, load_documents
from .job import JobSpec, Unfinished
from .jobfile import job_weights, record_plan
from .output import ResultLog
from .preflight import check_enforceable, check_ray, check_server, load_model_schema, load_schema
from .progress import Progress
from .stopping import (EXIT_WRITE_FAILED, WriteFailed, append_line, install_sigterm, interrupted_status,
                       stopped_by)
from .summary import Summary

def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def seconds(text: str) -> float:
    """argparse type of a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


BUDGET_HELP = ("seconds the schema's grammar may take to compile (first mask included); past it the request is "
               "refused and its line says so (default: the engine's, 4). Not with --url: the server's own budget "
               "applies")


def engine_extras(args: argparse.Namespace) -> dict[str, Any]:
    """Engine options the CLI passes only when given (so the engine's defaults stay the defaults)."""
    if args.grammar_compile_budget_s is None:
        return {}
    if args.url:
        raise SetupError("--grammar-compile-budget sets the in-process or Ray engines' budget; with --url the "
                         "server's own --grammar-compile-budget applies")
    return {"grammar_compile_budget_s": args.grammar_compile_budget_s}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglite extract", description="JSON-Schema extraction over documents: one "
                                 "output line per document, written as soon as it finishes")
    ap.add_argument("--schema", required=True, metavar="FILE|module:Model",
                    help="JSON Schema file of one record, or a pydantic model class (its validators run on every "
                         "record; see --max-retries)")
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
                    help="weight format: auto (measured on this machine), fp32, bf16, int8, int4, w4a16, w4a8, or "
                         "SMALL+LARGE (decode rows + prefill rows) such as w4a16+bf16")
    ap.add_argument("--num-threads", type=_positive, default=None,
                    help="CPU: torch threads (default: one per core; fewer on a shared machine); with --ray, per "
                         "replica, which declares as many CPUs to Ray (default 1)")
    ap.add_argument("--grammar-compile-budget", dest="grammar_compile_budget_s", type=seconds, default=None,
                    metavar="SECONDS", help=BUDGET_HELP)
    ap.add_argument("--max-tokens", type=_positive, default=512, help="per record (default: 512)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--limit", type=_positive, default=None, help="only the first N documents")
    ap.add_argument("--no-spans", dest="spans", action="store_false",
                    help="do not locate each value in its document (spans are on by default)")
    ap.add_argument("--no-confidence", dest="confidence", action="store_false",
                    help="do not score each value by the model's confidence (on by default where the backend "
                         "gives it: the sglite runtime and server)")
    ap.add_argument("--chunk-tokens", type=_positive, default=None, metavar="N",
                    help="split documents longer than N tokens into chunks, extract each and merge the records "
                         "(first non-null per field, lists joined; conflicts listed on the line)")
    ap.add_argument("--chunk-overlap", type=int, default=0, metavar="M",
                    help="with --chunk-tokens: tokens each chunk shares with the previous one (default 0)")
    ap.add_argument("--max-retries", type=int, default=0,
                    help="with --schema module:Model: send a record that fails the model's validators back to the "
                         "model with the errors, up to this many times (default 0)")
    ap.add_argument("--allow-extra-keys", action="store_true",
                    help="let the model add keys the schema does not name (default: objects are closed while "
                         "generating, which keeps outputs short; validation uses the schema as given)")
    return ap


def main(argv: list[str] | None = None, backend: Any = None) -> int:
    """The CLI body; `backend` (tests, embedding) replaces the one the options would build (and is not shut
    down here)."""
    args = _parser().parse_args(argv)
    old = install_sigterm()
    try:
        return _main(args, backend)
    except KeyboardInterrupt as e:   # while loading the model, say; the job itself reports how far it got
        print(f"\nsglite extract: {stopped_by(e)}; rerun with --resume to continue {args.output}", file=sys.stderr)
        return interrupted_status(e)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _main(args: argparse.Namespace, backend: Any) -> int:
    # cheap checks first; lowering the schema imports torch (through the grammar package), about 2 s of CPU
    try:
        spec, docs = _prepare(args)
        if args.ray is not None and args.url:
            raise SetupError("--ray and --url both say where the model runs; give one")
        if args.ray is None and (args.replicas is not None or args.shard_size is not None):
            raise SetupError("--replicas and --shard-size go with --ray")
        if args.chunk_overlap and args.chunk_tokens is None:
            raise SetupError("--chunk-overlap goes with --chunk-tokens")
        if args.chunk_tokens is not None and not 0 <= args.chunk_overlap < args.chunk_tokens:
            raise SetupError(f"--chunk-overlap must be in [0, --chunk-tokens), got {args.chunk_overlap} with "
                             f"--chunk-tokens {args.chunk_tokens}")
        engine_extras(args)
        if args.ray is not None and backend is None:
            check_ray(args.ray or None, args.replicas, args.shard_size)
        if args.url and backend is None:
            check_server(args.url)
        log = ResultLog.open(args.output, "resume" if args.resume else "overwrite" if args.overwrite else "new")
        recorded, args.weights = job_weights(args.output, args.resume, args.weights, remote=bool(args.url))
    except SetupError as e:
        return _fail(e)
    with log:
        try:
            check_enforceable(spec.schema_text, f"--schema {args.schema}")
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
            try:
                record_plan(backend, recorded, args.output)
            except SetupError as e:
                return _fail(e)
            if not has_chat_template(backend):
                print("sglite extract: the model has no chat template; the prompt is plain text (the instructions, "
                      "then the document)", file=sys.stderr)
                spec = spec.with_plain()
            job = Extraction(spec, backend, spans=args.spans, chunk_tokens=args.chunk_tokens,
                             chunk_overlap=args.chunk_overlap, confidence=args.confidence)
            return _run(job, todo, log, summary, args.output)
        finally:
            if own_backend:
                backend.shutdown()


def _prepare(args: argparse.Namespace) -> tuple[JobSpec, list[Document]]:
    """The job from the files: the schema (valid JSON Schema), the prompt, the documents."""
    schema_file = Path(args.schema)
    if ":" in args.schema and not schema_file.exists():
        schema: Any = load_model_schema(args.schema)
    else:
        if args.max_retries:
            raise SetupError("--max-retries re-asks when a pydantic model's validators fail; give --schema as "
                             "module:Model")
        schema = load_schema(schema_file)
    if args.max_retries < 0:
        raise SetupError(f"--max-retries must be >= 0, got {args.max_retries}")
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
    return job_spec(schema, instructions, max_tokens=args.max_tokens, temperature=args.temperature,
                    max_retries=args.max_retries, allow_extra_keys=args.allow_extra_keys), docs


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
        return Runtime(args.model, device=device, weights=args.weights, num_threads=args.num_threads,
                       **engine_extras(args))
    except Exception as e:   # noqa: BLE001 - a model that does not load is a setup error, said in one line
        raise SetupError(f"cannot load the model {args.model or '(default)'}: {type(e).__name__}: {e}") from None


def _ray_backend(args: argparse.Namespace, command: str = "extract") -> Any:
    """Started replicas (a RayRuntime) on the cluster --ray names; `sglite batch` starts them the same way."""
    from ..backend.ray_runtime import RayRuntime
    from ..distributed.cluster import ClusterError
    from ..distributed.pool import ReplicaStartError

    count = f"{args.replicas} replicas" if args.replicas else "replicas to fill the cluster"
    print(f"sglite {command}: starting {count} on {args.ray or 'the local Ray'} ...", file=sys.stderr)
    try:
        return RayRuntime(args.model, replicas=args.replicas, num_threads=args.num_threads or 1,
                          address=args.ray or None, shard_size=args.shard_size, device=args.device,
                          weights=args.weights, **engine_extras(args)).start()
    except (ClusterError, ReplicaStartError) as e:
        raise SetupError(f"--ray: {e}") from None


def _run(job: Extraction, todo: list[Document], log: ResultLog, summary: Summary, output: Path) -> int:
    backend = job.backend
    usage0 = backend.usage.as_dict()
    t0 = time.perf_counter()
    written, unfinished, progress = 0, [], None
    try:
        todo, early = job.check(todo)   # empty documents, documents over the context: lines before any generation
        for line in early:
            append_line(log, line)
            summary.add(line)
            written += 1
        prefix = job.prefix(todo)
        progress = Progress(backend, job.spec, todo, prefix).start()
        for line in job.run(todo, prefix):
            if isinstance(line, Unfinished):
                progress.doc_done(line.id, generated=False)
                unfinished.append(line)
                continue
            progress.doc_done(line["id"], generated=line.get("record") is not None or line.get("raw") is not None)
            append_line(log, line)
            summary.add(line)
            written += 1
    except KeyboardInterrupt as e:
        if progress is not None:
            progress.close()
        print(f"\nsglite extract: {stopped_by(e)}; {written} of {len(todo)} documents finished and are in "
              f"{output}: rerun with --resume to do the rest", file=sys.stderr)
        return interrupted_status(e)
    except SetupError as e:   # found on the documents once the model is known (a chunk size over the context)
        return _fail(e)
    except WriteFailed as e:
        if progress is not None:
            progress.close()
        print(f"sglite extract: cannot write {output} ({e}); the {written} documents before it are "
              "there: fix that, then rerun with --resume", file=sys.stderr)
        return EXIT_WRITE_FAILED
    finally:
        if progress is not None:
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
