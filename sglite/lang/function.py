"""SglFunction: what `@sgl.function` returns. run / run_batch / bind / trace."""
from __future__ import annotations

import inspect
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..protocol import SamplingParams
from .default_backend import get_default_backend
from .executor import StreamExecutor
from .global_config import global_config
from .sampling import OPTION_NAMES, GenOptions, GenParams
from .state import ProgramState

if TYPE_CHECKING:
    from ..backend.base import Backend
    from .tracer import Trace


def _run_defaults(options: dict[str, Any]) -> GenParams:
    """A run's generation defaults: its keyword options over SGLang's global output setting."""
    base = GenParams(SamplingParams(skip_special_tokens=global_config.skip_special_tokens_in_output))
    return GenOptions.from_kwargs(**options).over(base)


class SglFunction:
    """A structured-generation program: a Python function whose first parameter is the state `s`."""

    def __init__(self, func: Callable, bind_arguments: dict[str, Any] | None = None,
                 num_api_spec_tokens: int | None = None, lora_path: str | None = None):
        self.func = func
        if lora_path is not None and (not isinstance(lora_path, str) or not lora_path):
            raise ValueError(f"lora_path must be an adapter name (a non-empty str) or None, got {lora_path!r}")
        self.lora_path = lora_path      # the program's LoRA adapter: every run's default (run(lora_path=) overrides)
        self.bind_arguments = dict(bind_arguments or {})
        if num_api_spec_tokens is not None and (not isinstance(num_api_spec_tokens, int) or num_api_spec_tokens < 1):
            raise ValueError(f"num_api_spec_tokens must be a positive int or None, got {num_api_spec_tokens!r}")
        self.num_api_spec_tokens = num_api_spec_tokens
        params = list(inspect.signature(func).parameters.values())
        if not params:
            raise TypeError(f"@sgl.function {func.__name__}() must take the program state `s` as first parameter")
        self.arg_names = [p.name for p in params[1:]]
        self._required = [p.name for p in params[1:] if p.default is p.empty
                          and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        self._takes_var_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
        self.__name__ = getattr(func, "__name__", "program")
        self.__doc__ = func.__doc__

    def __repr__(self) -> str:
        return f"SglFunction({self.__name__}({', '.join(self.arg_names)}))"

    def bind(self, **kwargs: Any) -> "SglFunction":
        """A copy with some arguments fixed."""
        unknown = [k for k in kwargs if k not in self.arg_names and not self._takes_var_kwargs]
        if unknown:
            raise TypeError(f"{self.__name__}() has no parameters {unknown}")
        return SglFunction(self.func, {**self.bind_arguments, **kwargs}, self.num_api_spec_tokens, self.lora_path)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside another program, `f(s, ...)` appends f's program to `s`; otherwise the same as run()."""
        if args and isinstance(args[0], ProgramState):
            return self.func(args[0], *args[1:], **{**self.bind_arguments, **kwargs})
        return self.run(*args, **kwargs)

    # --- running ------------------------------------------------------------------------------------------
    def _split(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], GenParams]:
        """Program arguments vs. generation defaults: a keyword that names a program parameter is an argument.
        The defaults are validated here (RequestError before the program starts)."""
        program, options = {}, {}
        for k, v in kwargs.items():
            (options if k in OPTION_NAMES and k not in self.arg_names else program)[k] = v
        return {**self.bind_arguments, **program}, self._defaults(options)

    def _defaults(self, options: dict[str, Any]) -> GenParams:
        if self.lora_path is not None:
            options = {"lora_path": self.lora_path, **options}
        return _run_defaults(options)

    def run(self, *args: Any, stream: bool = False, backend: "Backend | None" = None, use_thread: bool = True,
            **kwargs: Any) -> ProgramState:
        """Run once. Keyword arguments that are generation options (max_new_tokens, temperature, ...) become
        defaults for every gen in the program. With stream=True, returns at once; read with s.text_iter()."""
        program_kwargs, defaults = self._split(kwargs)
        backend = backend or get_default_backend()
        state = ProgramState(StreamExecutor(backend, defaults, stream=stream, use_thread=use_thread,
                                            num_api_spec_tokens=self.num_api_spec_tokens))
        if stream:
            threading.Thread(target=self._execute, args=(state, args, program_kwargs, True), daemon=True).start()
            return state
        self._execute(state, args, program_kwargs, False)
        return state

    def _execute(self, state: ProgramState, args: tuple, kwargs: dict[str, Any], catch: bool) -> None:
        ex = state._ex
        try:
            state.ret_value = self.func(state, *args, **kwargs)
        except Exception as e:   # noqa: BLE001
            if not catch:
                ex.end()
                raise
            ex.fail(e)
        ex.end()
        ex.sync()
        if global_config.verbosity >= 2:
            print(state.text())

    def run_batch(self, batch_kwargs: list[dict[str, Any]], *, backend: "Backend | None" = None,
                  num_threads: int | str = "auto", progress_bar: bool = False, generator_style: bool = False,
                  **sampling: Any) -> list[ProgramState] | Iterator[ProgramState]:
        """Run one program per dict of arguments, concurrently, so the engine batches their calls.

        The text every instance starts with is found by tracing and prefilled once before the programs start
        (otherwise all of them would prefill it at the same time). A failing program records its error in
        its own `s.error()`; the others go on. Results are in input order (with generator_style=True, yielded
        in input order as they finish)."""
        from .tracer import constant_prefix

        if not isinstance(batch_kwargs, (list, tuple)) or not all(isinstance(k, dict) for k in batch_kwargs):
            raise TypeError("run_batch takes a list of dicts of program arguments")
        if not batch_kwargs:
            return []
        defaults = self._defaults(sampling)   # an unknown keyword: TypeError
        backend = backend or get_default_backend()
        calls = [{**self.bind_arguments, **kw} for kw in batch_kwargs]
        prefix = ""
        if len(calls) > 1 and global_config.enable_precache_with_tracing:
            prefix = constant_prefix(self.func, calls, backend.chat_template(), defaults=defaults)
        run_elsewhere = getattr(backend, "run_programs", None)   # a backend that runs whole programs (RayRuntime)
        if run_elsewhere is not None:
            return run_elsewhere(self, calls, sampling, prefix=prefix, generator_style=generator_style,
                                 progress_bar=progress_bar)
        if prefix:
            from ..backend.base import Prompt
            backend.commit_prefix(Prompt(prefix), defaults.lora_path)
        if num_threads == "auto":
            num_threads = min(len(calls), max(64, 4 * (os.cpu_count() or 1)))
        states = [ProgramState(StreamExecutor(backend, defaults, num_api_spec_tokens=self.num_api_spec_tokens))
                  for _ in calls]
        bar = None
        if progress_bar:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(calls), desc=self.__name__, unit="prog")
        pool = ThreadPoolExecutor(max_workers=int(num_threads), thread_name_prefix="sglite-batch")
        futures = [pool.submit(self._execute, st, (), kw, True) for st, kw in zip(states, calls)]
        if bar is not None:
            for f in futures:
                f.add_done_callback(lambda _: bar.update(1))
        pool.shutdown(wait=False)

        def in_order() -> Iterator[ProgramState]:
            for f, st in zip(futures, states):
                f.result()
                yield st
            if bar is not None:
                bar.close()
        if generator_style:
            return in_order()
        for _ in in_order():
            pass
        return states

    def trace(self, *args: Any, backend: "Backend | None" = None, **kwargs: Any) -> "Trace":
        """Run the program without a model and return its IR nodes (gens yield "", selects their first choice).
        Missing arguments become "{name}" placeholders."""
        from .chat_template import ChatTemplate
        from .tracer import Trace, TracingBackend, run_untimed

        program_kwargs, defaults = self._split(kwargs)
        for name in self._required:
            if name not in self.arg_names[:len(args)]:
                program_kwargs.setdefault(name, "{" + name + "}")
        template = backend.chat_template() if backend is not None else ChatTemplate.chatml()
        nodes: list = []
        ex = run_untimed(self.func, args, program_kwargs, TracingBackend(template, stop_at_first_call=False), nodes,
                         defaults)
        return Trace(nodes, ex.text)
