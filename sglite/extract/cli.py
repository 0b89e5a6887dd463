"""`sglite extract`: run a JSON-Schema extraction over a JSONL file of documents.

    sglite extract --schema S.json --prompt P.txt --input docs.jsonl --output out.jsonl

The prompt file holds the instructions (the system message) and is shared by every document, so its tokens
are prefilled once; if it contains `{text}`, the document is substituted there instead and the whole prompt
is the user message. Each output line is `{"id": ..., **record}`, or `{"id", "error", "raw"}` when a document
failed. Exit status 0 when every output validated against the schema."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import lang as sgl
from .protocol import closed_schema, json_schema_text


@sgl.function
def extract_program(s, document: str, instructions: str, schema: str, max_tokens: int):
    if "{text}" in instructions:
        s += sgl.user(instructions.replace("{text}", document))
    else:
        s += sgl.system(instructions)
        s += sgl.user(document)
    s += sgl.assistant(sgl.gen("record", max_tokens=max_tokens, json_schema=schema))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglite extract", description="JSON-Schema extraction over a JSONL file")
    ap.add_argument("--schema", type=Path, required=True, help="JSON Schema file")
    ap.add_argument("--prompt", type=Path, required=True, help="instructions file (may contain {text})")
    ap.add_argument("--input", type=Path, required=True, help="JSONL, one document per line")
    ap.add_argument("--output", type=Path, required=True, help="JSONL results, in input order")
    ap.add_argument("--text-field", default="text", help="field holding the document text (default: text)")
    ap.add_argument("--id-field", default="id", help="field holding the document id (default: id, else line no.)")
    ap.add_argument("--model", default=None, help="model path for the in-process engine (default model if unset)")
    ap.add_argument("--url", default=None, help="use a running sglite server instead of an in-process engine")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--weights", default="auto",
                    help="weight format: auto (measured on this machine), fp32, bf16, int8, int4, int4+bf16")
    ap.add_argument("--num-threads", type=int, default=None, help="CPU: torch threads (default: one per core)")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=None, help="only the first N documents")
    ap.add_argument("--allow-extra-keys", action="store_true",
                    help="let the model add keys the schema does not name (default: objects are closed while "
                         "generating, which keeps outputs short; validation uses the schema as given)")
    return ap


def _load_docs(path: Path, text_field: str, id_field: str, limit: int | None) -> list[tuple[Any, str]]:
    docs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
            text = obj.get(text_field) if isinstance(obj, dict) else obj if isinstance(obj, str) else None
            if not isinstance(text, str):
                raise ValueError(f"{path}:{n}: no string field {text_field!r} (set --text-field)")
            docs.append((obj.get(id_field, n) if isinstance(obj, dict) else n, text))
            if limit and len(docs) >= limit:
                break
    return docs


def main(argv: list[str] | None = None, backend: Any = None) -> int:
    """The CLI body; `backend` (tests, embedding) replaces the one the options would build."""
    args = _parser().parse_args(argv)
    try:
        try:
            schema = json.loads(args.schema.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{args.schema} is not JSON: {e}") from None
        instructions = args.prompt.read_text(encoding="utf-8").strip()
        docs = _load_docs(args.input, args.text_field, args.id_field, args.limit)
    except (OSError, ValueError) as e:
        print(f"sglite extract: {e}", file=sys.stderr)
        return 2
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        print(f"sglite extract: {args.schema} is not a valid JSON Schema: {e.message}", file=sys.stderr)
        return 2
    if not docs:
        print("sglite extract: no documents in the input", file=sys.stderr)
        return 2

    own_backend = backend is None
    if backend is not None:
        pass
    elif args.url:
        from .backend.runtime_endpoint import RuntimeEndpoint
        backend = RuntimeEndpoint(args.url)
    else:
        from .backend.runtime import Runtime
        device = args.device
        if device is None:
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
        print(f"loading model on {device} ...", file=sys.stderr)
        backend = Runtime(args.model, device=device, weights=args.weights, num_threads=args.num_threads)
    # the same conversion as gen(json_schema=Model): a schema file written from Model.model_json_schema()
    # gives the same text, hence the same grammar
    schema_json = json_schema_text(schema if args.allow_extra_keys else closed_schema(schema))
    t0 = time.perf_counter()
    try:
        states = extract_program.run_batch(
            [{"document": text, "instructions": instructions, "schema": schema_json,
              "max_tokens": args.max_tokens} for _, text in docs],
            backend=backend, progress_bar=True, temperature=args.temperature)
    finally:
        elapsed = time.perf_counter() - t0
        usage = backend.usage.as_dict()
        if own_backend:
            backend.shutdown()

    valid = 0
    validator = jsonschema.Draft202012Validator(schema)
    with open(args.output, "w", encoding="utf-8") as out:
        for (doc_id, _), st in zip(docs, states):
            err = st.error()
            raw = None if err else st["record"]
            line: dict[str, Any] = {"id": doc_id}
            finish = (st.get_meta_info("record") or {}).get("finish_reason") or {} if err is None else {}
            if err is None and finish.get("type") == "length":
                line.update(error=f"output cut at --max-tokens {args.max_tokens}; raise it", raw=raw)
            elif err is None:
                try:
                    record = json.loads(raw)
                    problems = [e.message for e in validator.iter_errors(record)]
                    if problems:
                        line.update(error="schema: " + "; ".join(problems[:3]), raw=raw)
                    elif isinstance(record, dict):
                        line.update(record)
                        valid += 1
                    else:
                        line.update(record=record)
                        valid += 1
                except json.JSONDecodeError as e:
                    line.update(error=f"not JSON: {e}", raw=raw)
            else:
                line.update(error=f"{type(err).__name__}: {err}", raw=raw)
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    n = len(docs)
    print(f"{n} documents in {elapsed:.1f} s ({n / elapsed:.2f} docs/s, "
          f"{usage['completion_tokens'] / elapsed:.0f} output tokens/s); prefix cache hit rate "
          f"{usage['cache_hit_rate']:.1%}; {valid}/{n} validated; wrote {args.output}")
    return 0 if valid == n else 1


if __name__ == "__main__":
    sys.exit(main())
