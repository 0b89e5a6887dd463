"""Replica: what one Ray actor holds, one in-process `Runtime` (one `Engine`), and the work it is sent: shards of
documents (extraction) or of program calls (run_batch). Each shard method is a generator: Ray streams every
item's result to the driver as soon as it finishes, so a replica lost mid-shard loses only what had not
come back yet.

Plain Python: `ReplicaPool` wraps the class with `ray.remote` in the driver, so importing this module imports
neither Ray nor torch. Every yielded item is `(key, outcome, usage)`: the key the driver sent, the item's
result, and this replica's cumulative token counters (UsageStats.as_dict), which the driver sums over
replicas."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Iterator

from .results import ProgramResult


class Replica:
    """One engine on one Ray worker. The constructor loads the model (Ray runs it in the worker process);
    `ready()` answers once it is done, with what the driver needs to know about the model."""

    def __init__(self, model: Any, engine_options: dict[str, Any]):
        from ..backend.runtime import Runtime

        self.runtime = Runtime(model, **engine_options)

    def ready(self) -> dict[str, Any]:
        """The replica's process id, host, chat template (the driver traces programs with it) and weight plan
        (str(WeightPlan): the driver passes it to every other replica, so all of them run the same one)."""
        import socket
        plan = getattr(getattr(getattr(self.runtime.engine, "model", None), "net", None), "plan", None)
        return {"pid": os.getpid(), "host": socket.gethostname(), "chat_template": self.runtime.chat_template(),
                "weights": None if plan is None else str(plan)}

    def stats(self) -> dict[str, Any]:
        """The engine's counters (get_stats), for the driver's progress bar."""
        return self.runtime.get_server_info()

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return [self.runtime.tokenize(t) for t in texts]

    # --- one call at a time (RayRuntime used as an ordinary backend) ---------------------------------------
    def generate(self, prompt: Any, params: Any) -> Any:
        return self.runtime.generate(prompt, params)

    def select(self, prompt: Any, choices: list[str], temperature: float, method: Any,
               lora_path: str | None = None) -> Any:
        return self.runtime.select(prompt, choices, temperature, method, lora_path=lora_path)

    def commit_prefix(self, prompt: Any, lora_path: str | None = None) -> None:
        self.runtime.commit_prefix(prompt, lora_path)

    def flush_cache(self) -> bool:
        return self.runtime.flush_cache()

    # --- shards (streamed: one yield per finished item) ---------------------------------------------------
    def extract(self, shard: list[tuple[str, Any]], spec: Any, prefix: str) -> Iterator[tuple[str, Any, dict]]:
        """Run one shard of (id_key, Document) with extract's job (sglite.extract.job.run_documents), yielding
        (id_key, result line or Unfinished, usage) as each document finishes. `prefix` is committed to the radix
        cache first: a hit after this replica's first shard, so the replica prefills it once."""
        from ..extract.inputs import id_key
        from ..extract.job import Unfinished, run_documents

        for line in run_documents(spec, [doc for _, doc in shard], self.runtime, prefix):
            yield id_key(line.id if isinstance(line, Unfinished) else line["id"]), line, self.runtime.usage.as_dict()

    def batch(self, shard: list[tuple[str, Any]], max_in_flight: int) -> Iterator[tuple[str, Any, dict]]:
        """Run one shard of (custom_id, BatchRequest) of `sglite batch` through the server's own app around this
        replica's engine (sglite.extract.batch_lines.run_requests, as in process), yielding (custom_id, output line or
        Unanswered, usage) as each request finishes. The requests run on an event loop in a thread of their own;
        their lines come through a queue."""
        import asyncio
        import queue
        import threading

        from ..extract.batch_lines import asgi_client, run_requests

        lines: queue.Queue = queue.Queue()
        end = object()

        async def answer() -> None:
            async with asgi_client(self.runtime.engine) as client:
                async for line in run_requests(client, [req for _, req in shard], max_in_flight, drop_model=True):
                    lines.put(line)

        def loop() -> None:
            try:
                asyncio.run(answer())
            except BaseException as e:   # noqa: BLE001 - handed to the generator, which raises it in the actor
                lines.put(e)
            lines.put(end)

        threading.Thread(target=loop, name="sglite-replica-batch", daemon=True).start()
        while (line := lines.get()) is not end:
            if isinstance(line, BaseException):
                raise line
            key = line["custom_id"] if isinstance(line, dict) else line.custom_id
            yield key, line, self.runtime.usage.as_dict()

    def run_programs(self, shard: list[tuple[Any, dict[str, Any]]], function: Any, sampling: dict[str, Any],
                     prefix: str) -> Iterator[tuple[Any, ProgramResult, dict]]:
        """Run `function` once per (key, kwargs) of the shard, concurrently so the engine batches them, yielding
        (key, ProgramResult, usage) as each program finishes."""
        from ..backend.base import Prompt

        if prefix:
            self.runtime.commit_prefix(Prompt(prefix), sampling.get("lora_path", getattr(function, "lora_path", None)))
        workers = min(len(shard), max(64, 4 * (os.cpu_count() or 1)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sglite-replica") as pool:
            futures = {pool.submit(_run_program, function, self.runtime, kwargs, sampling): key
                       for key, kwargs in shard}
            for fut in as_completed(futures):
                yield futures[fut], fut.result(), self.runtime.usage.as_dict()

    def shutdown(self) -> None:
        self.runtime.shutdown()


def _run_program(function: Any, runtime: Any, kwargs: dict[str, Any], sampling: dict[str, Any]) -> ProgramResult:
    """One program's outcome; an exception in it is its own result (as run_batch records it in s.error())."""
    try:
        state = function.run(backend=runtime, **kwargs, **sampling)
    except Exception as e:   # noqa: BLE001 - one program's failure is its own outcome
        return ProgramResult.failed(e)
    return ProgramResult.from_state(state)
