"""The extraction job from Python; `sglite extract` is a front end to it.

    from sglite.extract import extract

    for line in extract(["Ann is 31.", "Bo is 7."], Person, "Extract the person and their age."):
        print(line)     # {"id": 0, "record": {...}, "spans": {...}}, in completion order

`extract` takes the documents (strings, `(id, text)` pairs, `{"id", "text"}` dicts or Documents), a schema (a
JSON Schema dict or a pydantic model class: its validators then run on every record, and with max_retries a
failure goes back to the model as feedback) and the instructions, and yields one result line per document as it
finishes, the same lines the CLI writes. `Extraction` holds a job's setup; its steps are what the CLI runs:
`check` (the lines decided before any generation: empty documents, documents over the context), `prefix` and
`run`."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

from ..protocol import closed_schema, json_schema_text
from .chunking import chunk_bounds, merge_records, name_words, named_near
from .setup_error import SetupError
from .inputs import Document, id_key
from .job import JobSpec, Unfinished, run_documents, shared_prefix
from .spans import find_spans


class PydanticCheck:
    """A pydantic model's validation of generated text, as (field, problem) pairs: `field` is the error's
    location joined with dots ("" for the record as a whole, e.g. a model validator)."""

    def __init__(self, model: type):
        self.model = model

    def __call__(self, raw: str) -> list[tuple[str, str]]:
        from pydantic import ValidationError
        try:
            self.model.model_validate_json(raw)
        except ValidationError as e:
            return [(".".join(str(p) for p in err["loc"]), err["msg"]) for err in e.errors()]
        return []

    def __repr__(self) -> str:
        return f"PydanticCheck({self.model.__module__}.{self.model.__qualname__})"


def job_spec(schema: Any, instructions: str, *, max_tokens: int = 512, temperature: float = 0.0,
             max_retries: int = 0, allow_extra_keys: bool = False, plain: bool = False) -> JobSpec:
    """The JobSpec of a schema given as a JSON Schema dict or a pydantic model class."""
    check = None
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        check = PydanticCheck(schema)
        schema = schema.model_json_schema()
    if not isinstance(schema, dict):
        raise TypeError(f"schema must be a JSON Schema dict or a pydantic model class, got {type(schema).__name__}")
    if max_retries and check is None:
        raise ValueError("max_retries re-asks when a pydantic model's validators fail; give the schema as a "
                         "pydantic model class")
    text = json_schema_text(schema if allow_extra_keys else closed_schema(schema))
    return JobSpec(instructions.strip(), schema, text, max_tokens, temperature, plain, check, max_retries)


def has_chat_template(backend: Any) -> bool:
    """False for a base model without a chat template (the prompt is then plain text)."""
    return getattr(backend.chat_template(), "name", "") != "plain"


def context_length(backend: Any) -> int | None:
    """The model's context in tokens (prompt plus output), or None where the backend does not say."""
    n = getattr(getattr(backend, "engine", None), "max_context", None)
    if n is None and hasattr(backend, "get_model_info"):
        try:
            n = backend.get_model_info().get("max_context")
        except Exception:   # noqa: BLE001 - unknown: the engine refuses an overlong prompt itself
            n = None
    return n if isinstance(n, int) else None


def failed_line(doc_id: Any, why: str) -> dict[str, Any]:
    return {"id": doc_id, "record": None, "error": why, "raw": None}


class Extraction:
    """One job's setup: what to extract (spec) and where it runs (backend), with spans on or off, field
    confidence on or off (on where the backend gives constrained logprobs: the sglite runtime and server; not an
    OpenAI-compatible server) and the chunking of long documents (chunk_tokens None: a document over the context
    is an error line)."""

    def __init__(self, spec: JobSpec, backend: Any, *, spans: bool = True, chunk_tokens: int | None = None,
                 chunk_overlap: int = 0, confidence: bool = True):
        if chunk_tokens is not None and not 0 <= chunk_overlap < chunk_tokens:
            raise ValueError(f"chunk_overlap must be in [0, chunk_tokens), got {chunk_overlap} with chunk_tokens "
                             f"{chunk_tokens}")
        if confidence and getattr(backend, "constrained_logprobs", False):
            spec = dataclasses.replace(spec, confidence=True)
        self.spec, self.backend = spec, backend
        self.spans, self.chunk_tokens, self.chunk_overlap = spans, chunk_tokens, chunk_overlap
        self._chunks: dict[str, list[Document]] = {}     # id_key -> the chunks of a document that has several

    def check(self, docs: list[Document]) -> tuple[list[Document], list[dict[str, Any]]]:
        """(the documents to run, the error lines of the others), decided before any generation: an empty or
        whitespace-only document; without chunking, a document whose prompt does not fit the context (its token
        count and the context named). Documents longer than chunk_tokens are split here."""
        runnable, lines = [], []
        limit = context_length(self.backend)
        overhead = None
        for doc in docs:
            if not doc.text.strip():
                lines.append(failed_line(doc.id, "empty document (no text, or only whitespace); nothing to extract"))
                continue
            if limit is None and self.chunk_tokens is None:
                runnable.append(doc)
                continue
            try:
                if overhead is None:
                    overhead = self._prompt_overhead(doc)
                tokens = len(self.backend.tokenize(doc.text))
            except Exception as e:   # noqa: BLE001 - no tokenizer here (a server's we cannot load)
                if self.chunk_tokens is not None:
                    raise SetupError(f"--chunk-tokens needs the model's tokenizer in this process: {e}") from None
                limit = None          # the engine still refuses an overlong prompt, as that document's line
                runnable.append(doc)
                continue
            if self.chunk_tokens is not None and limit is not None and self.chunk_tokens + overhead >= limit:
                raise SetupError(f"--chunk-tokens {self.chunk_tokens} plus the prompt's {overhead} tokens do not fit "
                                 f"the context ({limit} tokens, prompt plus output); lower it")
            if self.chunk_tokens is not None and tokens > self.chunk_tokens:
                self._split(doc)
            elif limit is not None and tokens + overhead >= limit:
                lines.append(failed_line(doc.id, f"the document's prompt has {tokens + overhead} tokens and the "
                                                 f"context holds {limit} (prompt plus output); split it with "
                                                 "--chunk-tokens"))
                continue
            runnable.append(doc)
        return runnable, lines

    def _prompt_overhead(self, doc: Document) -> int:
        """Tokens the prompt adds to a document's own (instructions, template)."""
        from ..lang.tracer import TracingBackend, run_untimed
        from .job import extract_program
        prompt = run_untimed(extract_program.func, (), self.spec.call(doc),
                             TracingBackend(self.backend.chat_template(), stop_at_first_call=True)).text
        return max(0, len(self.backend.tokenize(prompt)) - len(self.backend.tokenize(doc.text)))

    def _split(self, doc: Document) -> None:
        tok = self.backend.tokenizer
        bounds = chunk_bounds(doc.text, self.backend.tokenize, tok.decode, self.chunk_tokens, self.chunk_overlap)
        self._chunks[id_key(doc.id)] = [Document(f"{id_key(doc.id)}#{k}", doc.text[a:b], f"{doc.where} chunk {k}")
                                        for k, (a, b) in enumerate(bounds)]

    def prefix(self, docs: list[Document]) -> str:
        """The prompt text every document's program starts with (prefilled once first)."""
        return shared_prefix(self.spec, docs, self.backend)

    def run(self, docs: list[Document], prefix: str = "") -> Iterator[dict[str, Any] | Unfinished]:
        """One result line (or Unfinished) per document of `docs` (as `check` returned them), in completion
        order; a chunked document's line comes when its last chunk finishes, merged."""
        by_key = {id_key(d.id): d for d in docs}
        parts = [c for d in docs for c in self._chunks.get(id_key(d.id), [d])]
        owner = {c.id: id_key(d.id) for d in docs for c in self._chunks.get(id_key(d.id), [])}
        pending: dict[str, dict[Any, dict]] = {}
        remote = getattr(self.backend, "run_documents", None)   # a backend that runs whole documents (RayRuntime)
        lines = remote(self.spec, parts, prefix) if remote is not None else \
            run_documents(self.spec, parts, self.backend, prefix)
        for line in lines:
            key = owner.get(line.id if isinstance(line, Unfinished) else line["id"])
            if key is None:
                yield self._finish(line, by_key)
                continue
            done = pending.setdefault(key, {})
            done[line.id if isinstance(line, Unfinished) else line["id"]] = line
            if len(done) == len(self._chunks[key]):
                del pending[key]
                yield self._finish(self._merge(by_key[key], [done[c.id] for c in self._chunks[key]]), by_key)

    def _merge(self, doc: Document, lines: list[dict[str, Any] | Unfinished]) -> dict[str, Any] | Unfinished:
        """One line for a chunked document: Unfinished if a chunk is; else the valid chunks' records merged."""
        for line in lines:
            if isinstance(line, Unfinished):
                return Unfinished(doc.id, line.why)
        good = [line["record"] for line in lines if line.get("record") is not None]
        supported = [self._supported(line["record"], chunk.text)
                     for line, chunk in zip(lines, self._chunks[id_key(doc.id)]) if line.get("record") is not None]
        errors = {k: line["error"] for k, line in enumerate(lines) if "error" in line}
        if not good:
            return failed_line(doc.id, f"every chunk failed; chunk 0: {errors.get(0)}") | {"chunks": len(lines)}
        record, conflicts = merge_records(good, self.spec.schema, supported)
        from .job import _validator
        problems = [e.message for e in _validator(self.spec.schema).iter_errors(record)]
        if problems:
            out = failed_line(doc.id, "the merged record: schema: " + "; ".join(problems[:3]))
            out["raw"] = record
        else:
            out = {"id": doc.id, "record": record}
        out["chunks"] = len(lines)
        if conflicts:
            out["conflicts"] = conflicts
        if errors:
            out["chunk_errors"] = {str(k): why for k, why in errors.items()}
        return out

    def _supported(self, record: dict[str, Any], text: str) -> set[str]:
        """The top-level fields of a chunk's record that its text states: a string found in it; a number found
        in it with the field's name just before (chunking.named_near), since small numbers occur everywhere."""
        props = self.spec.schema.get("properties") if isinstance(self.spec.schema.get("properties"), dict) else {}
        found = set()
        for pointer, where in find_spans(record, text).items():
            key = pointer.split("/")[1]
            if where["match"] == "not_found":
                continue
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not named_near(
                    text, where["start"], name_words(key, props.get(key) or {})):
                continue
            found.add(key)
        return found

    def _finish(self, line: dict[str, Any] | Unfinished, by_key: dict[str, Document]) -> dict[str, Any] | Unfinished:
        if self.spans and not isinstance(line, Unfinished) and line.get("record") is not None:
            line["spans"] = find_spans(line["record"], by_key[id_key(line["id"])].text)
        return line


def as_documents(documents: Iterable[Any]) -> list[Document]:
    """Documents from strings (ids 0, 1, ...), (id, text) pairs, {"id", "text"} dicts or Documents."""
    out = []
    for n, d in enumerate(documents):
        if isinstance(d, Document):
            out.append(d)
        elif isinstance(d, str):
            out.append(Document(n, d, f"document {n}"))
        elif isinstance(d, dict) and isinstance(d.get("text"), str):
            out.append(Document(d.get("id", n), d["text"], f"document {n}"))
        elif isinstance(d, tuple) and len(d) == 2 and isinstance(d[1], str):
            out.append(Document(d[0], d[1], f"document {n}"))
        else:
            raise TypeError(f"document {n}: give a string, an (id, text) pair or a dict with \"text\"; got "
                            f"{type(d).__name__}")
    keys = [id_key(d.id) for d in out]
    if len(set(keys)) < len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate document id {dup}; ids must be unique")
    return out


def extract(documents: Iterable[Any], schema: Any, instructions: str, *, backend: Any = None, model: Any = None,
            spans: bool = True, confidence: bool = True, max_tokens: int = 512, temperature: float = 0.0, max_retries: int = 0,
            chunk_tokens: int | None = None, chunk_overlap: int = 0, allow_extra_keys: bool = False,
            **engine_options: Any) -> Iterator[dict[str, Any]]:
    """Yields one result line per document as it finishes: `{"id", "record", "spans", "confidence"}` when the record
    validated, `{"id", "record": None, "error", "raw"}` when it did not (see docs/EXTRACTION.md for every key).
    `backend`: a Runtime, RuntimeEndpoint or RayRuntime to run on (kept running); without one, a Runtime of
    `model` (None: the default model) with `engine_options` is built here and shut down at the end. Bad input
    (a schema, a document) raises before anything runs; a document the service under it could not run (the
    server gone) raises RuntimeError naming it."""
    docs = as_documents(documents)
    if not isinstance(instructions, str) or not instructions.strip():
        raise ValueError("instructions must be a non-empty string (the prompt every document shares)")
    spec = job_spec(schema, instructions, max_tokens=max_tokens, temperature=temperature, max_retries=max_retries,
                    allow_extra_keys=allow_extra_keys)
    from .preflight import check_schema_dict
    check_schema_dict(spec)
    own = backend is None
    if own:
        from ..backend.runtime import Runtime
        backend = Runtime(model, **engine_options)
    try:
        if not has_chat_template(backend):
            spec = spec.with_plain()
        job = Extraction(spec, backend, spans=spans, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap,
                         confidence=confidence)
        todo, early = job.check(docs)
        yield from early
        for line in job.run(todo, job.prefix(todo)):
            if isinstance(line, Unfinished):
                raise RuntimeError(f"document {line.id!r} did not run: {line.why}")
            yield line
    finally:
        if own:
            backend.shutdown()
