"""ReplicaPool with weights "auto": the first replica decides the plan and every other replica, and a restart, is
started with that plan by name (stand-in replicas whose "auto" decision depends on their process, so replicas
left to decide alone would disagree)."""
from __future__ import annotations

import os

import ray

from sglite.distributed.pool import ReplicaPool, ReplicaSpec


class PlanReplica:
    def __init__(self, model, engine_options):
        asked = engine_options.get("weights", "auto")
        self.plan = f"decided-by-{os.getpid()}" if asked == "auto" else asked

    def ready(self):
        return {"pid": os.getpid(), "weights": self.plan}


def test_every_replica_and_restart_runs_the_first_replicas_plan(ray_cluster):
    pool = ReplicaPool(ReplicaSpec(num_cpus=1, engine_options={"weights": "auto"}), replicas=2, max_restarts=1,
                       actor_class=PlanReplica).start()
    try:
        first = pool.slots[0].info["weights"]
        assert first.startswith("decided-by-")
        assert [slot.info["weights"] for slot in pool.slots] == [first, first]
        assert pool.slots[0].info["pid"] != pool.slots[1].info["pid"]
        assert pool.weights == first
        assert pool.replace(pool.slots[0])
        assert ray.get(pool.slots[0].ready_ref)["weights"] == first
    finally:
        pool.shutdown()


def test_a_named_plan_is_given_to_every_replica_as_is(ray_cluster):
    pool = ReplicaPool(ReplicaSpec(num_cpus=1, engine_options={"weights": "bf16"}), replicas=2,
                       actor_class=PlanReplica).start()
    try:
        assert pool.weights == "bf16"
    finally:
        pool.shutdown()
