"""The public language API: `function`, `gen`, `select`, role helpers. Everything here only builds IR."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from sglite.protocol import RequestError

from .choices import ChoicesSamplingMethod, token_length_normalized
from .function import SglFunction
from .ir import ExprLike, ExprList, Gen, RoleBegin, RoleEnd, Select, to_expr
from .sampling import GenOptions


def function(func: Callable | None = None, *, num_api_spec_tokens: int | None = None, lora_path: str | None = None):
    """`@sgl.function` or `@sgl.function(...)`: make a program from a function whose first parameter is `s`.
    `num_api_spec_tokens=N` turns on API speculative execution (one call of N tokens serves several gens;
    see sglite/lang/api_speculation.py). `lora_path=NAME`: the LoRA adapter the program's gens and selects
    run under unless they (or run(lora_path=...)) name another."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens, lora_path=lora_path)
    return lambda f: SglFunction(f, num_api_spec_tokens=num_api_spec_tokens, lora_path=lora_path)


def gen(name: str | None = None, max_tokens: int | None = None, *, dtype: Any = None,
        choices: Sequence[str] | None = None, choices_method: ChoicesSamplingMethod | None = None,
        sources: Mapping[str, str] | None = None, **options: Any) -> Gen | Select:
    """Generate into variable `name`. Options are SGLang's (stop, temperature, top_p, top_k, min_p,
    frequency_penalty, presence_penalty, regex, json_schema (dict, JSON string or pydantic class), grammar (Lark),
    ebnf (GBNF, or Lark), structural_tag, span_of (a text: the output is a verbatim span of it), return_logprob,
    ...; see sglite.protocol.SamplingParams);
    `lora_path=NAME` runs this gen under a loaded LoRA adapter (default: the run's, else the base model).
    `dtype=int|float|bool|str` constrains the output;
    `choices=` makes this a select. `sources={"report": text}` gives the texts that json_schema's grounded
    fields name (`x-sglite-span`: a verbatim span; `x-sglite-number`: a number the text writes; see
    sglite/grounding.py); a name it lacks raises RequestError here. An unknown option raises TypeError; a bad
    value raises RequestError when the gen is appended to a running program (merged with the run's options)."""
    if choices is not None:
        return select(name, choices, temperature=options.get("temperature") or 0.0,
                      choices_method=choices_method or token_length_normalized, lora_path=options.get("lora_path"))
    if sources is not None:
        if options.get("json_schema") is None:
            raise RequestError("sources", "invalid_value", "sources= names texts for json_schema's grounded "
                               "fields; this gen has no json_schema")
        from sglite.grounding import resolve_sources
        from sglite.protocol import load_json_schema
        options["json_schema"] = resolve_sources(load_json_schema(options["json_schema"]), sources)
    return Gen(name, GenOptions.from_kwargs(max_tokens=max_tokens, dtype=dtype, **options))


def gen_int(name: str | None = None, max_tokens: int | None = None, **options: Any) -> Gen:
    return gen(name, max_tokens, dtype=int, **options)


def gen_string(name: str | None = None, max_tokens: int | None = None, **options: Any) -> Gen:
    return gen(name, max_tokens, dtype=str, **options)


def select(name: str | None = None, choices: Sequence[str] | None = None, temperature: float = 0.0,
           choices_method: ChoicesSamplingMethod = token_length_normalized, lora_path: str | None = None) -> Select:
    """Pick one of `choices` by the model's log-probabilities of each as the continuation (under the LoRA
    adapter `lora_path`, default the run's)."""
    if not choices or not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"select needs a non-empty list of non-empty strings, got {choices!r}")
    if not isinstance(choices_method, ChoicesSamplingMethod):
        raise TypeError("choices_method must be sgl.token_length_normalized, sgl.greedy_token_selection or "
                        "sgl.unconditional_likelihood_normalized")
    if lora_path is not None and (not isinstance(lora_path, str) or not lora_path):
        raise ValueError(f"lora_path must be an adapter name (a non-empty str) or None, got {lora_path!r}")
    return Select(name, tuple(choices), temperature, choices_method, lora_path)


def _role(role: str, expr: ExprLike | None) -> ExprList:
    inner = () if expr is None else (to_expr(expr),)
    return ExprList((RoleBegin(role), *inner, RoleEnd(role)))


def system(expr: ExprLike | None = None) -> ExprList:
    return _role("system", expr)


def user(expr: ExprLike | None = None) -> ExprList:
    return _role("user", expr)


def assistant(expr: ExprLike | None = None) -> ExprList:
    return _role("assistant", expr)


def system_begin() -> RoleBegin:
    return RoleBegin("system")


def system_end() -> RoleEnd:
    return RoleEnd("system")


def user_begin() -> RoleBegin:
    return RoleBegin("user")


def user_end() -> RoleEnd:
    return RoleEnd("user")


def assistant_begin() -> RoleBegin:
    return RoleBegin("assistant")


def assistant_end() -> RoleEnd:
    return RoleEnd("assistant")


def image(*_: Any, **__: Any):
    raise NotImplementedError("sglite serves text-only models; sgl.image is not supported")


def video(*_: Any, **__: Any):
    raise NotImplementedError("sglite serves text-only models; sgl.video is not supported")


def flush_cache(backend=None) -> bool:
    from .default_backend import get_default_backend
    backend = backend or get_default_backend(create=False)
    return backend.flush_cache() if backend is not None else False


def get_server_info(backend=None) -> dict:
    from .default_backend import get_default_backend
    backend = backend or get_default_backend(create=False)
    return backend.get_server_info() if backend is not None else {}
