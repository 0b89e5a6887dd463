"""`sglite serve` / `python -m sglite.launch_server`: load a model, start an Engine in a background thread, serve
it over HTTP with uvicorn. Also `ServerThread`, which runs the same app in a thread (tests, benchmarks)."""
from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
import threading
import time
from typing import Any

from .app import DEFAULT_MAX_BODY_BYTES, create_app
from .model_info import ModelInfo

# engine options: (flag, EngineConfig field, type, help). Unset ones keep EngineConfig's defaults.
ENGINE_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("--max-running-requests", "max_running_requests", int, "most requests decoded together"),
    ("--max-total-tokens", "max_total_tokens", int, "KV pool size in tokens (slots)"),
    ("--chunked-prefill-size", "chunked_prefill_size", int, "prefill long prompts in chunks of this many tokens"),
    ("--max-prefill-tokens", "max_prefill_tokens", int, "token budget of one prefill batch"),
    ("--schedule-policy", "schedule_policy", str, "'lpm' (longest prefix match first) or 'fcfs'"),
    ("--attention-backend", "attention_backend", str, "'torch' or 'triton' (default: triton on CUDA)"),
    ("--device", "device", str, "'cpu' or 'cuda' (default: the engine's choice)"),
    ("--seed", "seed", int, "random seed of the engine"),
    ("--max-context", "max_context", int, "serve a shorter context than the model's"),
    ("--json-whitespace", "json_whitespace", str,
     "JSON-schema outputs: 'compact', 'standard', 'flexible' (bounded runs) or 'any' whitespace"),
    ("--json-property-order", "json_property_order", str,
     "JSON-schema outputs: named properties in 'schema' order (forced keys) or in 'any' order"),
    ("--weights", "weights", str,
     "weight format: 'auto' (measured on this machine), 'fp32', 'bf16', 'int8', 'int4', 'w4a16', 'w4a8' "
     "or 'w4a16+bf16'"),
    ("--num-threads", "num_threads", int, "CPU: torch threads (default: one per core; use fewer on a shared machine)"),
    ("--speculative-algorithm", "speculative_algorithm", str,
     "'ngram': draft tokens from the prompt and earlier outputs, verified in one pass (default: off)"),
    ("--speculative-num-draft-tokens", "speculative_num_draft_tokens", int, "the most draft tokens per pass"),
    ("--speculative-row-cost", "speculative_row_cost", float,
     "what one more row adds to a decode step, as a share of a one-row step (default: measured as it runs)"),
    ("--grammar-compile-budget", "grammar_compile_budget_s", float,
     "seconds one regex / JSON schema / grammar may take to compile; past it the request gets a 400 (default 4)"),
    ("--grammar-cache-bytes", "grammar_cache_bytes", int,
     "bytes the compiled grammars may keep cached, mask caches included (default 536870912)"),
    ("--grammar-mask-overlap", "grammar_mask_overlap", str,
     "build grammar masks during the forward pass: 'auto' (when a core is free or on GPU), 'on' or 'off'"),
    ("--kv-cache-dtype", "kv_cache_dtype", str,
     "KV cache format: 'auto' (the activations' dtype), 'bf16', 'int8' or 'fp8_e4m3' (a scale per token and head)"),
    ("--kv-cache-bytes", "kv_cache_bytes", int,
     "the KV cache's memory when --max-total-tokens is not given (default 2 GiB)"),
    ("--max-loras-per-batch", "max_loras_per_batch", int,
     "distinct LoRA adapters one forward pass may hold (default 8); requests past it wait"),
)
# switches: (flag, EngineConfig field, value the flag sets, help)
ENGINE_FLAGS: tuple[tuple[str, str, bool, str], ...] = (
    ("--disable-radix-cache", "disable_radix_cache", True, "turn the prefix cache off"),
    ("--disable-jump-forward", "enable_jump_forward", False, "do not jump forward over text a grammar forces"),
    ("--disable-batch-invariance", "batch_invariant", False,
     "let a request's output depend on what shares its batch (prefill attention by SDPA, shared-prefix cascade)"),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglite serve", description="Serve a model over an OpenAI-compatible HTTP API "
                                "and SGLang's native /generate.")
    p.add_argument("--model", "--model-path", dest="model", default=None,
                   help="GGUF file or Hugging Face folder (default: SmolLM2-135M-Instruct)")
    p.add_argument("--tiny", action="store_true", help="serve the tiny random-weight test model (smoke tests)")
    p.add_argument("--served-model-name", default=None, help="the model id clients see (default: file name)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every request")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="request body size limit")
    p.add_argument("--max-pending-requests", type=int, default=None,
                   help="engine requests in flight past which new ones get HTTP 503 (default: no limit)")
    p.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"], help="model weights dtype")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    group = p.add_argument_group("engine options")
    for flag, field, typ, doc in ENGINE_OPTIONS:
        group.add_argument(flag, dest=field, type=typ, default=None, help=doc)
    group.add_argument("--lora-paths", dest="lora_paths", nargs="+", default=None, metavar="NAME=PATH",
                       help="LoRA adapters to load (PEFT folders or llama.cpp GGUF LoRA files); a request names one "
                       "with lora_path=NAME, or model=NAME on the OpenAI routes")
    for flag, _, _, doc in ENGINE_FLAGS:
        group.add_argument(flag, action="store_true", help=doc)
    return p


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    opts = {field: getattr(args, field) for _, field, _, _ in ENGINE_OPTIONS if getattr(args, field) is not None}
    if args.lora_paths:
        opts["lora_paths"] = list(args.lora_paths)
    for flag, field, value, _ in ENGINE_FLAGS:
        if getattr(args, flag.lstrip("-").replace("-", "_")):
            opts[field] = value
    return opts


def load_engine(args: argparse.Namespace) -> tuple[Any, ModelInfo]:
    """The model (loaded once, so the server can read its tokenizer and context) and an Engine around it."""
    import torch

    from sglite.runtime.engine import Engine, EngineConfig

    options = engine_options(args)
    EngineConfig.from_kwargs(**options)  # a bad option fails now, not after loading the model

    if args.tiny:  # random weights, the default model's tokenizer
        from sglite.runtime.testing import load_tiny_model
        model, path, tokenizer_path = load_tiny_model(), "tiny-random", None
    else:
        from sglite.runtime.model import load_model
        from sglite.runtime.model_source import resolve_model_path
        path = tokenizer_path = str(resolve_model_path(args.model))
        kw = {"dtype": getattr(torch, args.dtype)} if args.dtype else {"weights": options.pop("weights", "auto")}
        if args.device:
            kw["device"] = args.device
        if options.get("num_threads"):
            torch.set_num_threads(options["num_threads"])   # before 'auto' weights time this machine
        model = load_model(path, **kw)
    engine = Engine(model=model, background=True, **options)
    return engine, ModelInfo.from_engine(engine, name=args.served_model_name, path=path, tokenizer_path=tokenizer_path)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not _is_loopback(args.host) and args.api_key is None:
        print(f"sglite serve: warning: binding {args.host} without --api-key exposes the model to the network",
              file=sys.stderr)
    try:
        engine, info = load_engine(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"sglite serve: {e}", file=sys.stderr)
        return 2
    import uvicorn

    app = create_app(engine, info, api_key=args.api_key, max_body_bytes=args.max_body_bytes,
                     max_pending=args.max_pending_requests)
    print(f"sglite serve: {info.name} (context {info.max_context}) on http://{args.host}:{args.port}", file=sys.stderr)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    finally:
        engine.shutdown()
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServerThread:
    """Runs an ASGI app with uvicorn in a daemon thread on a free loopback port.

        with ServerThread(create_app(engine, info)) as server:
            httpx.get(server.url + "/health")
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        if not _is_loopback(host):
            raise ValueError(f"ServerThread binds loopback addresses only, got {host!r}")
        self.host = host
        self.port = port or _free_port(host)
        config = uvicorn.Config(app, host=host, port=self.port, log_level=log_level, lifespan="off",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="sglite-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"HTTP server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
