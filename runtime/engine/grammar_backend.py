"""The engine's side of constrained decoding: compile a request's regex / JSON schema / grammar (GBNF or Lark) /
structural tag before it is queued
(errors reach the caller as RequestError naming the constraint, never the loop), create its matcher, and produce
jump-forward tokens.
The automata themselves live in sglite.runtime.constrained."""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from sglite.protocol import RequestError, SamplingParams

from ..constrained import GrammarCompiler, UnsupportedSchemaError, grammar_syntax, jump_forward_tokens
from ..constrained.budget import CompileBudget, CompileCancelled, cancellable, within
from ..defaults import GRAMMAR_CACHE_BYTES, JSON_PROPERTY_ORDER, JSON_WHITESPACE
from ..constrained.ir.generation_caps import GenerationCaps
from .request import Req

GENERATION_CAPS = GenerationCaps()   # the documented defaults: 512 chars per string, 128 items, depth 12
log = logging.getLogger("sglite.runtime")
_EARLY_CANCELS = 1024   # aborts remembered for compiles not started yet (an abort can overtake its compile)


class GrammarBackend:
    def __init__(self, tokenizer, json_whitespace: str = JSON_WHITESPACE,
                 json_property_order: str = JSON_PROPERTY_ORDER, budget: CompileBudget | None = CompileBudget(),
                 cache_bytes: int = GRAMMAR_CACHE_BYTES):
        self.tokenizer = tokenizer
        self.budget = budget
        self.cache_bytes = cache_bytes
        self.json_whitespace = json_whitespace
        self.json_property_order = json_property_order
        self._compiler = None  # one GrammarCompiler per engine; it caches compiled grammars
        self._compiler_lock = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}   # rid -> the cancel flag of its compile under way
        self._early: OrderedDict[str, None] = OrderedDict()   # rids aborted before their compile began
        self._cancels_lock = threading.Lock()

    def _get_compiler(self):
        """The engine's one compiler, built by the first caller (building its token index takes seconds of CPU;
        concurrent first callers, e.g. run_batch's program threads, wait for it instead of each building one)."""
        if self._compiler is None:
            with self._compiler_lock:
                if self._compiler is None:
                    self._compiler = GrammarCompiler(self.tokenizer, budget=self.budget,
                                                     cache_bytes=self.cache_bytes)
        return self._compiler

    def warm_up(self) -> None:
        """Builds the compiler on a background thread, so that the first constrained request finds its token
        index built or under way (about a second of CPU on a 49k vocabulary: the main job's engine sat idle that
        long between the shared prefix's prefill and the reports' first masks). A failure here is left to the
        first request that needs the compiler, which raises it."""
        def build() -> None:
            try:
                self._get_compiler()
            except Exception as e:      # noqa: BLE001 - reported where a request needs the compiler
                log.debug("grammar compiler warm-up failed: %s", e)
        threading.Thread(target=build, name="sglite-grammar-warm-up", daemon=True).start()

    def cancel(self, rid: str) -> None:
        """Cancels the compile of request `rid`: it stops at its next budget checkpoint and raises RequestError
        (code "request_aborted"). Thread-safe; an abort that arrives before its compile begins is remembered (the
        newest _EARLY_CANCELS of them), so that compile stops at once."""
        with self._cancels_lock:
            event = self._cancels.get(rid)
            if event is not None:
                event.set()
                return
            self._early[rid] = None
            while len(self._early) > _EARLY_CANCELS:
                self._early.popitem(last=False)

    def compiling(self) -> int:
        """How many compiles are under way (for tests and metrics)."""
        with self._cancels_lock:
            return len(self._cancels)

    def compile(self, params: SamplingParams, rid: str | None = None) -> Any | None:
        """The compiled grammar for params (None if unconstrained). Raises RequestError(param=the constraint's
        kind) on a bad spec. Runs on the caller's thread, which also computes the grammar's first mask, so the
        engine loop never pays for it. `cancel(rid)` stops it (see there)."""
        spec = params.constraint
        if spec is None:
            return None
        kind, text = spec
        event = threading.Event()
        if rid is not None:
            with self._cancels_lock:
                if self._early.pop(rid, "running") is None:
                    event.set()
                self._cancels[rid] = event
        try:
            compiler = self._get_compiler()
            with cancellable(event), within(self.budget):   # the compile and the first mask, one deadline
                grammar = self._compile(compiler, kind, text)
                grammar.matcher().allowed_mask()   # cached in the shared grammar from here on
                return grammar
        except RequestError:
            raise
        except CompileCancelled as e:
            raise RequestError(kind, "request_aborted", f"the compile of sampling_params[{kind!r}] was cancelled: "
                                                        "the request was aborted") from e
        except UnsupportedSchemaError as e:
            raise RequestError(kind, "unsupported_schema", str(e)) from e
        except ValueError as e:   # GrammarError: a malformed or too large spec, or one over its budget
            raise RequestError(kind, "invalid_grammar", str(e)) from e
        except Exception as e:  # a compiler bug must not look like a server error to the caller
            raise RequestError(kind, "invalid_grammar",
                               f"sampling_params[{kind!r}] could not be compiled: {type(e).__name__}: {e}") from e
        finally:
            if rid is not None:
                with self._cancels_lock:
                    self._cancels.pop(rid, None)

    def _compile(self, compiler: GrammarCompiler, kind: str, text: str) -> Any:
        if kind == "regex":
            return compiler.compile_regex(text)
        if kind == "json_schema":
            # generation mode (see compile_json_schema): objects that name their properties are closed, no name
            # twice in an object, unbounded strings / arrays / recursion capped (GenerationCaps defaults)
            return compiler.compile_json_schema(text, whitespace=self.json_whitespace,
                                                property_order=self.json_property_order, close_objects=True,
                                                unique_keys=True, caps=GENERATION_CAPS)
        if kind == "ebnf":        # SGLang's EBNF is GBNF; a Lark grammar is taken too
            return compiler.compile_grammar(text, syntax=grammar_syntax(text))
        if kind == "grammar":
            return compiler.compile_grammar(text, syntax="lark")
        if kind == "span_of":
            return compiler.compile_span(text)
        return compiler.compile_structural_tag(text, whitespace=self.json_whitespace,
                                               property_order=self.json_property_order)

    def jump_forward(self, req: Req) -> list[int]:
        """Tokens the grammar forces next, tokenized with back-off by sglite.runtime.constrained; the matcher is
        advanced over them. [] when nothing is forced. Adds the seconds it took to req.grammar_s."""
        t0 = time.perf_counter()
        tokens = list(jump_forward_tokens(self.tokenizer, req.matcher))
        for tok in tokens:
            if not req.matcher.accept_token(tok):
                raise RuntimeError(f"jump_forward_tokens produced token {tok} that its matcher rejects")
        req.grammar_s += time.perf_counter() - t0
        return tokens
