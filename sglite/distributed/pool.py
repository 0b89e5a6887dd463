"""ReplicaPool: N Ray actors, each a `Replica` holding one Engine, with the resources each declares and a
budget of restarts. The driver's `Dispatcher` sends them work; the pool only starts, replaces and stops them."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .replica import Replica


class ReplicaStartError(RuntimeError):
    """The replicas could not start (the model does not load, the cluster lacks the resources)."""


@dataclass(frozen=True)
class ReplicaSpec:
    """What every replica is: its model, its Engine options, and the Ray resources it declares.
    `num_cpus` is also its torch thread count (`num_threads`) unless engine_options set one."""
    model: Any = None                      # a path (or None: the default model) readable on every node
    engine_options: dict[str, Any] = field(default_factory=dict)
    num_cpus: int = 1
    num_gpus: float = 0.0
    max_concurrency: int = 16              # shards a replica runs at once, plus the driver's small calls

    def __post_init__(self) -> None:
        if self.num_cpus < 1:
            raise ValueError(f"num_cpus must be >= 1, got {self.num_cpus}")
        if self.num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {self.num_gpus}")
        if self.max_concurrency < 2:
            raise ValueError(f"max_concurrency must be >= 2, got {self.max_concurrency}")


@dataclass
class Slot:
    """One replica position. `generation` counts its restarts; `ready_ref` is set while a new actor loads."""
    index: int
    actor: Any = None
    generation: int = 0
    restarts_left: int = 0
    ready: bool = False
    ready_ref: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"replica {self.index}" + (f" (restart {self.generation})" if self.generation else "")


class ReplicaPool:
    def __init__(self, spec: ReplicaSpec, replicas: int, max_restarts: int = 1, actor_class: type = Replica):
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        self.spec = spec
        self.slots = [Slot(i, restarts_left=max_restarts) for i in range(replicas)]
        self._actor_class = actor_class
        self._remote: Any = None

    def start(self) -> "ReplicaPool":
        """Create every actor and wait until each has loaded its model. Ray must be initialized. Raises
        ReplicaStartError (and stops what started) when the cluster cannot hold them or a model fails to load."""
        import ray

        need_cpu, need_gpu = len(self.slots) * self.spec.num_cpus, len(self.slots) * self.spec.num_gpus
        have = ray.cluster_resources()
        if need_cpu > have.get("CPU", 0) or need_gpu > have.get("GPU", 0):
            raise ReplicaStartError(
                f"{len(self.slots)} replicas need {need_cpu} CPUs" + (f" and {need_gpu:g} GPUs" if need_gpu else "")
                + f"; the Ray cluster has {have.get('CPU', 0):g} CPUs and {have.get('GPU', 0):g} GPUs: lower "
                "--replicas or --num-threads, or add nodes")
        # with weights "auto", the first replica decides the plan and every other one (restarts too) is given it,
        # so that no replica measures its own machine into a different plan (and different greedy outputs)
        first = self.slots[:1] if self.spec.engine_options.get("weights", "auto") == "auto" else []
        for group in (first, self.slots[len(first):]):
            for slot in group:
                self._launch(slot)
            try:
                infos = ray.get([slot.ready_ref for slot in group])
            except ray.exceptions.RayError as e:
                self.shutdown()
                raise ReplicaStartError(f"a replica failed to load the model: {describe_error(e)}") from None
            for slot, info in zip(group, infos):
                slot.ready, slot.ready_ref, slot.info = True, None, info
            if group and first and infos[0].get("weights"):
                self.spec = replace(self.spec, engine_options={**self.spec.engine_options,
                                                               "weights": infos[0]["weights"]})
        return self

    @property
    def weights(self) -> str | None:
        """The weight plan every replica runs (str(WeightPlan)), once started; None if they did not say."""
        plans = {slot.info.get("weights") for slot in self.slots if slot.info}
        return plans.pop() if len(plans) == 1 else None

    def _launch(self, slot: Slot) -> None:
        import ray

        if self._remote is None:
            self._remote = ray.remote(self._actor_class)
        options = {"num_threads": self.spec.num_cpus, **self.spec.engine_options}
        slot.actor = self._remote.options(num_cpus=self.spec.num_cpus, num_gpus=self.spec.num_gpus,
                                          max_concurrency=self.spec.max_concurrency,
                                          max_restarts=0).remote(self.spec.model, options)
        slot.ready, slot.ready_ref = False, slot.actor.ready.remote()

    def replace(self, slot: Slot) -> bool:
        """Kill the slot's actor (if it still runs) and, while restarts are left, start a new one in its place
        (loading in the background: `slot.ready_ref` resolves when it is up). False: the slot is gone."""
        import ray

        if slot.actor is not None:
            ray.kill(slot.actor, no_restart=True)
            slot.actor = None
        slot.ready, slot.ready_ref = False, None
        if slot.restarts_left < 1:
            return False
        slot.restarts_left -= 1
        slot.generation += 1
        self._launch(slot)
        return True

    def live(self) -> list[Slot]:
        return [s for s in self.slots if s.ready]

    def starting(self) -> list[Slot]:
        return [s for s in self.slots if s.ready_ref is not None]

    def shutdown(self) -> None:
        """Stop every actor (their engines stop with their processes)."""
        import ray

        for slot in self.slots:
            if slot.actor is not None:
                ray.kill(slot.actor, no_restart=True)
            slot.actor, slot.ready, slot.ready_ref = None, False, None


def describe_error(error: BaseException) -> str:
    """The first line of what went wrong inside a Ray task or actor constructor."""
    cause = getattr(error, "cause", None) or error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}"
