"""Runtime: the in-process engine as a language backend (the embedded default; no server needed)."""
from __future__ import annotations

from typing import Any, Iterator

from ..lang.chat_template import ChatTemplate
from ..protocol import GenerateRequest, chunk_meta_info
from .base import Completion
from .engine_backend import EngineBackend


class Runtime(EngineBackend):
    """`sgl.Runtime(model=None, **engine_options)`: builds an `Engine` (model: None = the default model, a
    path, or a loaded Model) running its loop in a background thread. `Runtime(engine=...)` wraps an existing
    engine: anything that implements `sglite.protocol.EngineAPI` (the real Engine, a test fake), with
    flush_cache and get_stats.

    The constructor only builds the engine (whose options, e.g. num_threads, are the engine's business); it
    registers no exit hook. Stop it with `shutdown()` (which shuts the engine down, wrapped or built) or
    `with sgl.Runtime(...) as rt:`."""

    def __init__(self, model: Any = None, *, engine: Any = None, model_path: Any = None, **engine_options: Any):
        super().__init__()
        model = model if model is not None else model_path   # SGLang spells it model_path=
        if engine is None:
            from ..runtime.engine.engine import Engine
            engine_options.setdefault("background", True)
            engine = Engine(model, **engine_options)
        self.engine = engine
        self._template: ChatTemplate | None = None

    @property
    def tokenizer(self) -> Any:
        tok = getattr(self.engine, "tokenizer", None)
        if tok is None:
            tok = self.engine.model.tokenizer
        return tok

    def _complete(self, requests: list[GenerateRequest]) -> list[Completion]:
        handles = []
        try:
            for r in requests:
                handles += self.engine.submit(r)
        except BaseException:
            for h in handles:   # a later request was refused: the ones queued before it do not run on
                self.engine.abort(h.rid)
            raise
        return [Completion(out.text, out.meta_info()) for out in (h.output() for h in handles)]

    def _stream(self, request: GenerateRequest) -> Iterator[Completion]:
        (handle,) = self.engine.submit(request)
        finished = False
        try:
            for chunk in handle:
                finished = chunk.finished
                yield Completion(chunk.text_delta, chunk_meta_info(chunk, request.return_logprob))
        finally:
            if not finished:   # the reader stopped early: free the request's slots
                self.engine.abort(request.rid)

    def flush_cache(self) -> bool:
        return bool(self.engine.flush_cache())

    def get_server_info(self) -> dict[str, Any]:
        return dict(self.engine.get_stats())

    def shutdown(self) -> None:
        shutdown = getattr(self.engine, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
