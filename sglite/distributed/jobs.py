"""The two batch jobs on a Dispatcher, shaped like their local versions: `extract_documents` yields what
sglite.extract.job.run_documents yields (result lines and Unfinished), `run_programs` what run_batch returns."""
from __future__ import annotations

import json
from typing import Any, Iterator

from .dispatcher import Dispatcher, Failed
from .results import ProgramResult, ReplicaLost


def extract_documents(dispatcher: Dispatcher, spec: Any, docs: list[Any], prefix: str = "") -> Iterator[Any]:
    """One result line (or Unfinished) per document, in completion order. A document that failed twice (its
    replica lost under it, or the engine aborting it) is an error line of the local job's shape; one that no
    replica was left to run is Unfinished (not written; --resume runs it)."""
    from ..extract.inputs import id_key
    from ..extract.job import Unfinished

    by_key = {id_key(doc.id): doc for doc in docs}
    for key, outcome in dispatcher.run("extract", list(by_key.items()), (spec, prefix), is_failure=_unfinished,
                                       order_key=lambda doc: doc.text):
        if not isinstance(outcome, Failed):
            yield outcome
        elif outcome.final:
            yield {"id": by_key[key].id, "record": None, "error": outcome.why, "raw": None}
        else:
            yield Unfinished(by_key[key].id, outcome.why)


def _unfinished(outcome: Any) -> str | None:
    """An Unfinished from a replica (its engine aborted the document) is a failed attempt, retried elsewhere."""
    from ..extract.job import Unfinished
    return outcome.why if isinstance(outcome, Unfinished) else None


def run_programs(dispatcher: Dispatcher, function: Any, calls: list[dict[str, Any]], sampling: dict[str, Any],
                 prefix: str = "") -> Iterator[tuple[int, ProgramResult]]:
    """(index into calls, result) per program, in completion order; a program lost twice has a ReplicaLost
    error."""
    for index, outcome in dispatcher.run("run_programs", list(enumerate(calls)), (function, sampling, prefix),
                                         order_key=_call_text):
        if isinstance(outcome, Failed):
            outcome = ProgramResult.failed(ReplicaLost(outcome.why))
        yield index, outcome


def _call_text(call: dict[str, Any]) -> str:
    """A program call's arguments as text in a fixed order: calls that fill the program alike sort together."""
    return json.dumps(call, sort_keys=True, default=str)


def batch_requests(dispatcher: Dispatcher, requests: list[Any], max_in_flight: int) -> Iterator[Any]:
    """`sglite batch` on the replicas: one output line (or Unanswered) per BatchRequest, in completion order. A
    request the replicas could not answer twice (the replica lost under it, 502/503/504) is an output line with
    its error; one that no replica was left to run is Unanswered (not written; --resume runs it)."""
    from ..extract.batch_lines import Unanswered, failed_output_line

    by_key = {req.custom_id: req for req in requests}
    for key, outcome in dispatcher.run("batch", list(by_key.items()), (max_in_flight,), is_failure=_unanswered,
                                       order_key=_call_text_of_request):
        if not isinstance(outcome, Failed):
            yield outcome
        elif outcome.final:
            yield failed_output_line(by_key[key], outcome.why)
        else:
            yield Unanswered(key, outcome.why)


def _unanswered(outcome: Any) -> str | None:
    """An Unanswered from a replica (its engine refused for load, 502/503/504) is a failed attempt, retried."""
    return None if isinstance(outcome, dict) else outcome.why


def _call_text_of_request(req: Any) -> str:
    """A request's route and body as text: bodies that start alike (one system prompt) share a replica."""
    return req.url + json.dumps(req.body, sort_keys=True, default=str)
