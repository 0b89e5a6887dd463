"""The Dispatcher's fault rules on a local Ray cluster, with stand-in replicas that hold no engine (so these
run in seconds): a lost replica's items run again, each key comes back exactly once, an item that fails twice
is given up, and with every replica gone the rest come back as not run."""
from __future__ import annotations

import os

from sglite.distributed.dispatcher import Dispatcher, Failed
from sglite.distributed.pool import ReplicaPool, ReplicaSpec


class FlakyReplica:
    """Upper-cases its items; its process exits on "poison", and its method raises on "raise"."""

    def __init__(self, model, engine_options):
        pass

    def ready(self):
        return {"pid": os.getpid()}

    def work(self, shard):
        for key, payload in shard:
            if payload == "poison":
                os._exit(1)
            if payload == "raise":
                raise ValueError("this item always raises")
            yield key, payload.upper(), {"requests": 1}


def _run(items, max_restarts, **dispatch):
    pool = ReplicaPool(ReplicaSpec(num_cpus=1), replicas=1, max_restarts=max_restarts,
                       actor_class=FlakyReplica).start()
    try:
        return list(Dispatcher(pool, **dispatch).run("work", items)), pool
    finally:
        pool.shutdown()


def test_an_item_that_kills_its_replica_twice_is_given_up_and_the_rest_come_back_once(ray_cluster):
    items = [(i, "poison" if i == 3 else f"doc{i}") for i in range(8)]
    got, pool = _run(items, max_restarts=3, shard_size=1, shards_per_replica=1)
    assert sorted(k for k, _ in got) == list(range(8))   # each key exactly once
    outcomes = dict(got)
    assert isinstance(outcomes[3], Failed) and outcomes[3].final, outcomes[3]
    assert outcomes[3].why.startswith("failed 2 times") and "replica 0" in outcomes[3].why
    assert {k: v for k, v in outcomes.items() if k != 3} == {i: f"DOC{i}" for i in range(8) if i != 3}
    assert pool.slots[0].generation == 2   # a new actor after each loss; the poison is not sent a third time


def test_with_every_replica_gone_the_rest_come_back_not_run(ray_cluster):
    items = [(0, "poison"), (1, "a"), (2, "b")]
    got, _ = _run(items, max_restarts=0, shard_size=1, shards_per_replica=1)
    assert sorted(k for k, _ in got) == [0, 1, 2]
    assert all(isinstance(v, Failed) and not v.final and "no replica left" in v.why for _, v in got), got


def test_an_item_whose_method_raises_is_retried_then_given_up_and_the_replica_lives(ray_cluster):
    items = [(0, "x"), (1, "raise"), (2, "y")]
    got, pool = _run(items, max_restarts=0, shard_size=1, shards_per_replica=2)
    outcomes = dict(got)
    assert sorted(outcomes) == [0, 1, 2]
    assert outcomes[0] == "X" and outcomes[2] == "Y"
    assert isinstance(outcomes[1], Failed) and outcomes[1].final and "ValueError" in outcomes[1].why
    assert pool.slots[0].generation == 0


class ShardRecorder(FlakyReplica):
    def work(self, shard):
        for key, payload in shard:
            yield key, [k for k, _ in shard], {"requests": 1}


def test_order_key_cuts_shards_from_sorted_payloads(ray_cluster):
    """Payloads that sort together (the same document twice) go out in one shard; each key comes back once."""
    items = [(0, "beta"), (1, "alpha"), (2, "beta"), (3, "alpha"), (4, "gamma"), (5, "gamma")]
    pool = ReplicaPool(ReplicaSpec(num_cpus=1), replicas=1, max_restarts=0, actor_class=ShardRecorder).start()
    try:
        got = dict(Dispatcher(pool, shard_size=2).run("work", items, order_key=str))
        unsorted = dict(Dispatcher(pool, shard_size=2).run("work", items))
    finally:
        pool.shutdown()
    assert sorted(got) == list(range(6))
    assert {tuple(v) for v in got.values()} == {(1, 3), (0, 2), (4, 5)}
    assert {tuple(v) for v in unsorted.values()} == {(0, 1), (2, 3), (4, 5)}


class SlowFrontReplica(FlakyReplica):
    """Answers each item with its own pid, 1 ms an item; the replica sent the front half of the keys (below 80)
    first stalls 3 s at the start of every shard, long enough for the other to finish its own half on any
    machine load."""
    slow = None

    def work(self, shard):
        import time
        if self.slow is None:
            self.slow = any(key < 80 for key, _ in shard)
        if self.slow:
            time.sleep(3)
        for key, _ in shard:
            time.sleep(0.001)
            yield key, os.getpid(), {"requests": 1}


def test_a_fast_replica_takes_over_a_slow_ones_queue(ray_cluster):
    """Each replica starts on its own half of the (sorted) items; the fast one, done early, takes the back half of
    what the slow one has left, again and again, so the job ends when the slow one's in-flight items do."""
    items = [(i, f"doc{i:03d}") for i in range(160)]     # 80 a replica: 64 in flight, 16 queued
    pool = ReplicaPool(ReplicaSpec(num_cpus=1), replicas=2, max_restarts=0, actor_class=SlowFrontReplica).start()
    try:
        got = list(Dispatcher(pool).run("work", items, order_key=str))
    finally:
        pool.shutdown()
    assert sorted(k for k, _ in got) == list(range(160))           # each key exactly once
    by_pid: dict[int, list[int]] = {}
    for key, pid in got:
        by_pid.setdefault(pid, []).append(key)
    slow = next(keys for keys in by_pid.values() if 0 in keys)
    fast = next(keys for keys in by_pid.values() if 0 not in keys)   # (its first shard held keys from 80 up)
    assert len(fast) > 88 and len(slow) < 72, (sorted(slow), sorted(fast))   # 80 each without stealing
    assert max(slow) < 80                                          # the slow one only ever ran its own front
