"""The extraction itself: one program per document, run concurrently so the engine batches them, and each
document's result line handed back as soon as that document finishes (completion order, not input order).

A document's own failure (its output cut at max_tokens, invalid, a request the engine refuses for it) is a
result line. A failure of the service under it (the server unreachable, the engine shut down or failing a
step) is not: the document is reported as `Unfinished`, nothing is written, and `--resume` runs it again."""
from __future__ import annotations

import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

from .. import lang as sgl
from ..grounding import uses_sources
from ..protocol import ABORT_GRAMMAR, RequestError
from .confidence import field_confidence
from .inputs import Document


Check = Callable[[str], "list[tuple[str, str]]"]   # generated text -> (field, problem) pairs; [] when it passes
FEEDBACK = ("That JSON object failed validation:\n{problems}\nReply with the corrected JSON object for the same "
            "document.")


@sgl.function
def extract_program(s, document: str, instructions: str, schema: str, max_tokens: int, plain: bool = False,
                    check: Check | None = None, max_retries: int = 0, confidence: bool = False):
    """One document's record in `record`; with `check`, each failure is sent back as feedback (the conversation so
    far is the cached prefix of the next try) up to `max_retries` times, the tries' texts in `try1`, `try2`, ...
    and their problems in the variable `problems` (one list per failed try). `plain`: the model has no chat
    template, so the prompt is plain text: the instructions, then the document (or the instructions with the
    document in place of {text}). `confidence`: each answer's meta_info carries its constrained logprobs
    (confidence.py scores the fields from them)."""
    def ask(text: str) -> None:
        nonlocal s
        s += (text + "\n\n") if plain else sgl.user(text)

    def answer(name: str) -> None:
        nonlocal s
        # grounded fields (sglite/grounding.py) name the input document "document"
        sources = {"document": document} if uses_sources(schema) else None
        gen = sgl.gen(name, max_tokens=max_tokens, json_schema=schema, sources=sources,
                      **({"return_constrained_logprob": True} if confidence else {}))
        s += gen if plain else sgl.assistant(gen)

    if "{text}" in instructions:
        ask(instructions.replace("{text}", document))
    elif plain:
        ask(instructions + "\n\n" + document)
    else:
        s += sgl.system(instructions)
        ask(document)
    answer("record")
    if check is None:
        return
    failures = []
    name = "record"
    for attempt in range(1, max_retries + 1):
        finish = (s.get_meta_info(name) or {}).get("finish_reason") or {}
        problems = check(s[name]) if finish.get("type") == "stop" else []
        if not problems:
            break
        failures.append(problems)
        if plain:
            s += "\n\n"
        ask(FEEDBACK.format(problems="\n".join(f"- {field or '(record)'}: {why}" for field, why in problems)))
        name = f"try{attempt + 1}"
        answer(name)
    s["problems"] = failures


class Unfinished(NamedTuple):
    """A document that did not run to an outcome of its own (see the module docstring)."""
    id: Any
    why: str


@dataclass(frozen=True)
class JobSpec:
    instructions: str
    schema: dict[str, Any]   # as given: every record is validated against it
    schema_text: str         # what the engine compiles (objects closed unless --allow-extra-keys)
    max_tokens: int
    temperature: float
    plain: bool = False              # the model has no chat template: a plain-text prompt
    check: Check | None = None       # re-ask on what it finds (a pydantic model's validators), see extract_program
    max_retries: int = 0
    confidence: bool = False         # score each field (confidence.py): the backend must give constrained logprobs

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")

    def with_plain(self) -> "JobSpec":
        """The same job for a model without a chat template."""
        return dataclasses.replace(self, plain=True)

    def call(self, doc: Document) -> dict[str, Any]:
        """extract_program's arguments for one document."""
        call = {"document": doc.text, "instructions": self.instructions, "schema": self.schema_text,
                "max_tokens": self.max_tokens, "plain": self.plain}
        if self.confidence:
            call["confidence"] = True
        if self.check is not None and self.max_retries:
            call.update(check=self.check, max_retries=self.max_retries)
        return call


def shared_prefix(spec: JobSpec, docs: list[Document], backend: Any) -> str:
    """The prompt text every document's program starts with (the instructions), as run_batch finds it."""
    from ..lang.tracer import constant_prefix
    if len(docs) < 2:
        return ""
    return constant_prefix(extract_program.func, [spec.call(d) for d in docs], backend.chat_template())


def run_documents(spec: JobSpec, docs: list[Document], backend: Any, prefix: str = "",
                  num_workers: int | None = None) -> Iterator[dict[str, Any] | Unfinished]:
    """Yields one result line (or Unfinished) per document as it finishes. `prefix` (see shared_prefix) is
    prefilled once first, since otherwise every program would prefill it at the same time. Closing the generator
    (or an exception in the consumer, e.g. Ctrl-C) cancels the documents not yet started; the caller shuts the
    backend down to stop the running ones."""
    from ..backend.base import Prompt

    if not docs:
        return
    if prefix:
        backend.commit_prefix(Prompt(prefix))
    validator = _validator(spec.schema)
    workers = num_workers or min(len(docs), max(64, 4 * (os.cpu_count() or 1)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sglite-extract")
    try:
        futures = {pool.submit(_run_one, spec, doc, backend): doc for doc in docs}
        for fut in as_completed(futures):
            raw, meta, error, problems = fut.result()
            finish = meta.get("finish_reason") or {}
            doc_id = futures[fut].id
            if error is not None and not isinstance(error, RequestError):
                yield Unfinished(doc_id, f"{type(error).__name__}: {error}")
            elif finish.get("type") == "abort" and finish.get("code") != ABORT_GRAMMAR:
                yield Unfinished(doc_id, f"aborted ({finish.get('code')}): {finish.get('message')}")
            else:
                line = result_line(doc_id, raw, finish, error, validator, spec.max_tokens, spec.check)
                if spec.confidence and line.get("record") is not None:
                    scores = field_confidence(raw, meta.get("output_token_constrained_logprobs") or [])
                    if scores:
                        line["confidence"] = scores
                if spec.check is not None and spec.max_retries and error is None:
                    line["tries"] = len(problems) + 1
                    if problems:
                        line["retried"] = sorted({field for p in problems for field, _ in p})
                yield line
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _run_one(spec: JobSpec, doc: Document,
             backend: Any) -> tuple[str | None, dict, BaseException | None, list[list[tuple[str, str]]]]:
    """(generated text of the last try, its meta_info, error, the problems of each failed try) of one
    document's program."""
    try:
        state = extract_program.run(backend=backend, temperature=spec.temperature, **spec.call(doc))
    except Exception as e:   # noqa: BLE001 - one document's failure is its own outcome
        return None, {}, e, []
    err = state.error()
    if err is not None:
        return None, {}, err, []
    problems = state["problems"] if "problems" in state else []
    name = f"try{len(problems) + 1}" if problems else "record"
    return state[name], state.get_meta_info(name) or {}, None, problems


def _validator(schema: dict[str, Any]) -> Any:
    from .preflight import validator_class
    return validator_class(schema)(schema)


def result_line(doc_id: Any, raw: str | None, finish: dict, error: BaseException | None, validator: Any,
                max_tokens: int, check: Check | None = None) -> dict[str, Any]:
    """`{"id", "record"}` for a record that validated; `{"id", "record": null, "error", "raw"}` otherwise."""
    def failed(why: str) -> dict[str, Any]:
        return {"id": doc_id, "record": None, "error": why, "raw": raw}

    if isinstance(error, RequestError):
        return failed(f"request refused ({error.code}, {error.param}): {error}")
    if error is not None:
        return failed(f"{type(error).__name__}: {error}")
    if finish.get("type") == "length":
        return failed(f"output cut at --max-tokens {max_tokens}; raise it")
    if finish.get("type") == "abort":
        return failed(f"aborted ({finish.get('code')}): {finish.get('message')}")
    try:
        record = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as e:
        return failed(f"not JSON: {e}")
    problems = [e.message for e in validator.iter_errors(record)]
    if problems:
        return failed("schema: " + "; ".join(problems[:3]))
    if check is not None:
        found = check(raw)
        if found:
            return failed("validator: " + "; ".join(f"{field or '(record)'}: {why}" for field, why in found[:3]))
    return {"id": doc_id, "record": record}

