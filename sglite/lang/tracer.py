"""Tracing: run a program without a model to see its IR, or to find the text every instance of a batch starts
with (the constant prefix run_batch prefills once).

The tracing backend answers no calls: the first gen/select stops the trace (the executor records the error and
skips the rest), so the traced text is exactly what precedes the first model call."""
from __future__ import annotations

from typing import Any, Callable

from ..backend.base import Backend, Completion, Prompt
from .chat_template import ChatTemplate
from .choices import ChoicesDecision
from .executor import StreamExecutor
from .ir import Expr
from .sampling import GenParams


class StopTrace(Exception):
    """Raised by the tracing backend at the first model call."""


class TracingBackend(Backend):
    """Records calls instead of making them. `stop_at_first_call=True` ends the trace at the first call;
    otherwise gens produce placeholders `<name>` and selects take their first choice."""

    def __init__(self, template: ChatTemplate, stop_at_first_call: bool):
        super().__init__()
        self._template = template
        self.stop_at_first_call = stop_at_first_call

    def chat_template(self) -> ChatTemplate:
        return self._template

    def generate(self, prompt: Prompt, params: GenParams) -> Completion:
        if self.stop_at_first_call:
            raise StopTrace()
        return Completion("")

    def select(self, prompt, choices, temperature, method) -> ChoicesDecision:
        if self.stop_at_first_call:
            raise StopTrace()
        return ChoicesDecision(choices[0])


def run_untimed(func: Callable, args: tuple, kwargs: dict[str, Any], backend: TracingBackend,
                record: list[Expr] | None = None, defaults: GenParams | None = None) -> StreamExecutor:
    """Run `func` inline (no worker thread) against the tracing backend; exceptions end the trace."""
    from .state import ProgramState

    ex = StreamExecutor(backend, defaults, use_thread=False, trace=record)
    try:
        func(ProgramState(ex), *args, **kwargs)
    except Exception as e:   # noqa: BLE001 - reading a variable after StopTrace lands here; that ends the trace
        ex.fail(e)
    ex.end()
    return ex


def constant_prefix(func: Callable, batch_kwargs: list[dict[str, Any]], template: ChatTemplate,
                    min_chars: int = 32, defaults: GenParams | None = None) -> str:
    """The longest text every instance appends before its first model call, cut back to a line or word
    boundary so that its tokenization matches the instances'. "" when shorter than `min_chars`."""
    backend = TracingBackend(template, stop_at_first_call=True)
    prefix: str | None = None
    for kwargs in batch_kwargs:
        text = run_untimed(func, (), kwargs, backend, defaults=defaults).text
        prefix = text if prefix is None else _common_prefix(prefix, text)
        if not prefix:
            return ""
    prefix = prefix or ""
    # BPE merges across the cut otherwise: keep a trailing newline, drop a trailing partial word / space
    cut = prefix.rfind("\n") + 1 or max(prefix.rfind(" "), 0)
    prefix = prefix[:cut] if cut else prefix
    return prefix if len(prefix) >= min_chars else ""


def _common_prefix(a: str, b: str) -> str:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]


class Trace:
    """A traced program: its IR nodes in execution order; prints one node per line."""

    def __init__(self, nodes: list[Expr], text: str):
        self.nodes = nodes
        self.text = text

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return "Trace([\n" + "".join(f"  {n!r},\n" for n in self.nodes) + "])"
