"""RayRuntime: a language backend that is a pool of Engine replicas on a Ray cluster.

    rt = sgl.RayRuntime(model, replicas=4, num_threads=8, max_total_tokens=65536)
    states = extract.run_batch([{"doc": d} for d in docs], backend=rt)   # sharded over the replicas
    rt.shutdown()

`run_batch` hands it the whole batch: the programs run on the replicas, in shards (see
sglite/distributed/dispatcher.py), and come back as ProgramResults (read like finished ProgramStates). A
replica that dies loses nothing: its unfinished programs run again elsewhere, at most twice. Used one call at
a time (`run`, `fork`), it sends each call to a replica in turn. Nothing starts, and Ray is not imported,
until the first use (or `start()`)."""
from __future__ import annotations

import itertools
import threading
from typing import Any, Iterator

from ..lang.chat_template import ChatTemplate
from .base import Backend, Prompt, UsageStats

USAGE_FIELDS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")


class RayRuntime(Backend):
    """`RayRuntime(model=None, *, replicas=None, num_threads=1, address=None, num_gpus=None, shard_size=None,
    max_restarts=1, **engine_options)`.

    model: a path every node can read (None: the default model). replicas: None fills the cluster (one per
    `num_threads` CPUs, or per GPU on CUDA). num_threads: each replica's torch threads and the CPUs it declares
    to Ray. address: a cluster's "host:port" / "ray://host:port" / "auto"; None attaches to the local one
    (starting it if none runs). num_gpus: per replica (None: 1 on CUDA, else 0). shard_size: items per shard
    (None: see Dispatcher.policy). max_restarts: per replica slot. engine_options: Engine's (device, weights,
    max_total_tokens, ...)."""

    constrained_logprobs = True   # its replicas run the sglite runtime

    def __init__(self, model: Any = None, *, replicas: int | None = None, num_threads: int = 1,
                 address: str | None = None, num_gpus: float | None = None, shard_size: int | None = None,
                 max_restarts: int = 1, **engine_options: Any):
        super().__init__()
        for name, value in (("replicas", replicas), ("num_threads", num_threads), ("shard_size", shard_size)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"RayRuntime {name} must be an int >= 1, got {value!r}")
        self.model, self.replicas, self.num_threads = model, replicas, num_threads
        self.address, self.num_gpus, self.shard_size, self.max_restarts = address, num_gpus, shard_size, max_restarts
        self.engine_options = engine_options
        self.pool: Any = None          # sglite.distributed.pool.ReplicaPool, once started
        self.dispatcher: Any = None
        self._connected = False        # this object called ray.init (and calls ray.shutdown)
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self._direct = UsageStats()    # calls sent one at a time; shard results report their replica's counters

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> "RayRuntime":
        """Connect to Ray and start the replicas (each loads the model). Idempotent. Raises ClusterError (no
        Ray, unreachable cluster) or ReplicaStartError (too few resources, the model does not load)."""
        with self._lock:
            if self.pool is not None:
                return self
            from ..distributed.cluster import connect, require_ray
            from ..distributed.dispatcher import Dispatcher
            from ..distributed.pool import ReplicaPool, ReplicaSpec

            ray = require_ray()
            self._connected = connect(self.address)
            try:
                have = ray.cluster_resources()
                device = self.engine_options.get("device") or ("cuda" if have.get("GPU") else "cpu")
                cuda = str(device).startswith("cuda")
                num_gpus = self.num_gpus if self.num_gpus is not None else (1 if cuda else 0)
                replicas = self.replicas or _fill(have, num_gpus if cuda else 0, self.num_threads)
                spec = ReplicaSpec(self.model, {**self.engine_options, "device": device,
                                                "num_threads": self.num_threads},
                                   num_cpus=self.num_threads, num_gpus=num_gpus)
                pool = ReplicaPool(spec, replicas, self.max_restarts).start()
            except BaseException:
                self._disconnect()
                raise
            self.pool, self.dispatcher = pool, Dispatcher(pool, self.shard_size)
            self.dispatcher.on_usage = self._sum_usage
            return self

    def shutdown(self) -> None:
        """Stop the replicas, and Ray itself if this object started it."""
        with self._lock:
            if self.pool is not None:
                self.pool.shutdown()
                self.pool = self.dispatcher = None
            self._disconnect()

    def _disconnect(self) -> None:
        if self._connected:
            import ray
            ray.shutdown()
            self._connected = False

    def __enter__(self) -> "RayRuntime":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # --- whole batches ------------------------------------------------------------------------------------
    def run_programs(self, function: Any, calls: list[dict[str, Any]], sampling: dict[str, Any], prefix: str = "",
                     generator_style: bool = False, progress_bar: bool = False) -> list[Any] | Iterator[Any]:
        """run_batch's work on the replicas: ProgramResults in input order (generator_style: yielded in input
        order as they finish). `prefix`: the text every call starts with, prefilled once per replica."""
        from ..distributed.jobs import run_programs

        self.start()
        stream = run_programs(self.dispatcher, function, calls, sampling, prefix)
        bar = None
        if progress_bar:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(calls), desc=getattr(function, "__name__", "program"), unit="prog")

        def in_order() -> Iterator[Any]:
            results: dict[int, Any] = {}
            next_index = 0
            for index, result in stream:
                results[index] = result
                if bar is not None:
                    bar.update(1)
                while next_index in results:
                    yield results.pop(next_index)
                    next_index += 1
            if bar is not None:
                bar.close()
        return in_order() if generator_style else list(in_order())

    def run_documents(self, spec: Any, docs: list[Any], prefix: str = "") -> Iterator[Any]:
        """`sglite extract`'s job on the replicas: yields what sglite.extract.job.run_documents yields."""
        from ..distributed.jobs import extract_documents

        self.start()
        return extract_documents(self.dispatcher, spec, docs, prefix)

    # --- Backend, one call at a time --------------------------------------------------------------------
    def _replica(self) -> Any:
        self.start()
        live = self.pool.live()
        if not live:
            raise RuntimeError("RayRuntime: no replica is running (all lost)")
        return live[next(self._turn) % len(live)].actor

    def generate(self, prompt: Prompt, params: Any) -> Any:
        import ray
        out = ray.get(self._replica().generate.remote(prompt, params))
        self._direct.add(out.meta_info)
        self._sum_usage()
        return out

    def select(self, prompt: Prompt, choices: list[str], temperature: float, method: Any,
               lora_path: str | None = None) -> Any:
        import ray
        return ray.get(self._replica().select.remote(prompt, choices, temperature, method, lora_path=lora_path))

    def commit_prefix(self, prompt: Prompt, lora_path: str | None = None) -> None:
        """Prefill `prompt` on every live replica."""
        import ray
        self.start()
        ray.get([slot.actor.commit_prefix.remote(prompt, lora_path) for slot in self.pool.live()])

    def flush_cache(self) -> bool:
        """Empty every live replica's prefix cache; True if all did."""
        import ray
        self.start()
        return all(ray.get([slot.actor.flush_cache.remote() for slot in self.pool.live()]))

    def chat_template(self) -> ChatTemplate:
        self.start()
        return self.pool.slots[0].info["chat_template"]

    def tokenize(self, text: str) -> list[int]:
        import ray
        return ray.get(self._replica().tokenize.remote([text]))[0]

    def get_server_info(self) -> dict[str, Any]:
        """The live replicas' engine counters, summed (numbers only), and how many replicas run."""
        import ray
        self.start()
        live = self.pool.live()
        totals: dict[str, Any] = {"replicas": len(live)}
        for stats in ray.get([slot.actor.stats.remote() for slot in live]):
            for key, value in stats.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    totals[key] = totals.get(key, 0) + value
        return totals

    def _sum_usage(self) -> None:
        """usage = every replica's last reported counters (dead ones' included) + the one-at-a-time calls."""
        reports = list(self.dispatcher.usage.values()) if self.dispatcher is not None else []
        direct = self._direct.as_dict()
        with self.usage._lock:
            for name in USAGE_FIELDS:
                setattr(self.usage, name, direct[name] + sum(int(r.get(name) or 0) for r in reports))


def _fill(resources: dict[str, float], gpus_each: float, cpus_each: int) -> int:
    """How many replicas the cluster holds: one per `gpus_each` GPUs when they use GPUs, else per `cpus_each`."""
    if gpus_each:
        return max(1, int(resources.get("GPU", 0) // gpus_each))
    return max(1, int(resources.get("CPU", 1)) // cpus_each)
