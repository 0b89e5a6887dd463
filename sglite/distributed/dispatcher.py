"""Dispatcher: the driver's loop that sends shards of work to a ReplicaPool and streams results back.

Items are (key, payload) pairs with unique keys. They go out in shards: a shard is the unit a replica runs at
once (its engine batches what it holds, and the shared prompt prefix is prefilled once per replica, then hit in
its radix cache). A replica's results stream back one item at a time (a Ray streaming generator per shard), in
completion order.

Balance. The (sorted) items are cut into one contiguous run per replica, so neighbours (the same document twice,
one template filled alike) stay on one replica and share its cache. Each replica holds up to `in_flight` items
(by default its whole share, at most 64: what its engine batches) and is topped up from its own run as items
come back, in shards of half that; a replica whose run is empty takes the back half of the longest other run.
So in a job of more than 64 items a replica, no replica idles while another has a queue. With `shard_size`
given, shards are exactly that size and each replica holds `shards_per_replica` of them (2 by default).

Faults. When a replica dies (its actor killed, its node lost) every item it held that had not come back fails
one attempt: it is queued again, at the front, for the other replicas or for the replica the pool starts in
the dead one's place. An item that fails `max_attempts` times comes back as `Failed(final=True)` and is not
tried again. So each key comes back exactly once: as the replica's outcome or as a Failed. If every replica is
gone (no restarts left), the items not yet run come back as `Failed(final=False)`."""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

from .pool import ReplicaPool, Slot, describe_error


class Failed(NamedTuple):
    """An item with no outcome of its own. final: it failed max_attempts times (else no replica was left)."""
    why: str
    final: bool


class _Policy(NamedTuple):
    shard_size: int     # the most items in one shard; a replica is topped up once a whole shard (or what is left
                        # of its run) can go out
    in_flight: int      # the most items a replica holds
    shards: int         # the most shards a replica holds (its actor runs them concurrently)


@dataclass
class _Shard:
    slot: Slot
    pending: dict[Any, Any]   # key -> payload of the items not yet back


class Dispatcher:
    def __init__(self, pool: ReplicaPool, shard_size: int | None = None, shards_per_replica: int | None = None,
                 max_attempts: int = 2):
        if shard_size is not None and shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        if (shards_per_replica is not None and shards_per_replica < 1) or max_attempts < 1:
            raise ValueError("shards_per_replica and max_attempts must be >= 1")
        self.pool = pool
        self.shard_size = shard_size
        self.shards_per_replica = shards_per_replica
        self.max_attempts = max_attempts
        self.usage: dict[tuple[int, int], dict[str, Any]] = {}   # (slot, generation) -> its last counters
        self.on_usage: Callable[[], None] | None = None          # called after `usage` changes
        self.retried = 0                                         # items sent again after a failed attempt

    def policy(self, n_items: int) -> "_Policy":
        """How a job of n_items is sent (see the module docstring)."""
        replicas = max(1, len(self.pool.slots))
        if self.shard_size is not None:
            shards = self.shards_per_replica or 2
            return _Policy(self.shard_size, self.shard_size * shards, shards)
        # a whole share in flight up to 64 items (halving a replica's batch cost more than the tail it
        # balanced: bench/ray_extract.py, 40 documents: 75 s against 56 s), in shards of half that
        in_flight = max(1, min(64, math.ceil(n_items / replicas)))
        half = math.ceil(in_flight / 2)
        shards = self.shards_per_replica or max(1, self.pool.spec.max_concurrency - 1)
        return _Policy(half, in_flight, shards)

    def run(self, method: str, items: list[tuple[Any, Any]], args: tuple = (),
            is_failure: Callable[[Any], str | None] | None = None,
            order_key: Callable[[Any], str] | None = None) -> Iterator[tuple[Any, Any]]:
        """Yield (key, outcome) once per item, in completion order: the replica's outcome of
        `Replica.<method>(shard, *args)`, or Failed. `is_failure(outcome)` names outcomes that count as a
        failed attempt (retried like a lost replica's items), else None. `order_key(payload)`: shards are cut
        from the items sorted by it (stable), so payloads whose text starts alike (the same document twice,
        one template filled alike) land in one shard and share that replica's radix cache; None: input order."""
        import ray

        if order_key is not None:
            items = sorted(items, key=lambda item: order_key(item[1]))
        job = _Job(self, method, args, items)
        while job.queued or job.running:
            job.fill()
            starting = {slot.ready_ref: slot for slot in self.pool.starting()}
            if not job.running and not starting:   # every replica gone: what is left cannot run
                for key, _ in job.queued_items():
                    yield key, Failed("no replica left to run it (all lost, no restarts left)", final=False)
                return
            ready, _ = ray.wait([*job.running, *starting], num_returns=1)
            for obj in ready:
                if obj in starting:
                    self._started(starting[obj], obj)
                elif obj in job.running:   # (not: its replica was lost while handling an earlier object)
                    for key, outcome in job.receive(obj):
                        why = None if is_failure is None or isinstance(outcome, Failed) else is_failure(outcome)
                        if why is None:
                            yield key, outcome
                        else:
                            yield from job.fail({key: job.payloads[key]}, why)

    def _started(self, slot: Slot, ready_ref: Any) -> None:
        """A restarted replica answered ready() (or failed to load: then the next restart, if any is left)."""
        import ray
        try:
            slot.info, slot.ready, slot.ready_ref = ray.get(ready_ref), True, None
        except ray.exceptions.RayError:
            self.pool.replace(slot)


class _Job:
    """One run()'s state: each replica's run of items not yet sent (`runs`, by slot index; `retry` first, for
    anyone), shards on replicas (`running`), attempts per key."""

    def __init__(self, dispatcher: Dispatcher, method: str, args: tuple, items: list[tuple[Any, Any]]):
        self.d, self.method, self.args = dispatcher, method, args
        self.policy = dispatcher.policy(len(items))
        slots = [slot.index for slot in dispatcher.pool.slots] or [0]
        per = math.ceil(len(items) / len(slots))
        self.runs = {i: deque(items[n * per:(n + 1) * per]) for n, i in enumerate(slots)}
        self.retry: deque = deque()
        self.payloads = dict(items)
        self.attempts: Counter = Counter()
        self.running: dict[Any, _Shard] = {}   # a replica's streaming generator -> its shard

    @property
    def queued(self) -> bool:
        return bool(self.retry) or any(self.runs.values())

    def queued_items(self) -> Iterator[tuple[Any, Any]]:
        yield from self.retry
        for run in self.runs.values():
            yield from run

    def _source(self, index: int) -> deque:
        """Where replica `index` takes its next items: the retried ones, its own run, else the back half of the
        longest other run (moved to its own)."""
        if self.retry:
            return self.retry
        own = self.runs.setdefault(index, deque())
        if not own:
            donor = max(self.runs.values(), key=len)
            for _ in range(math.ceil(len(donor) / 2)):
                own.appendleft(donor.pop())
        return own

    def fill(self) -> None:
        """Top up every live replica to the policy's in-flight items, in whole shards (or the rest of a run)."""
        p = self.policy
        for slot in self.d.pool.live():
            mine = [s for s in self.running.values() if s.slot is slot]
            held, shards = sum(len(s.pending) for s in mine), len(mine)
            while shards < p.shards and held < p.in_flight and self.queued:
                source = self._source(slot.index)
                n = min(p.in_flight - held, p.shard_size, len(source))
                if held and n < min(p.shard_size, len(source)):
                    break                      # wait to send a worthwhile shard (neighbours stay together)
                shard = [source.popleft() for _ in range(n)]
                gen = getattr(slot.actor, self.method).options(num_returns="streaming").remote(shard, *self.args)
                self.running[gen] = _Shard(slot, dict(shard))
                held, shards = held + n, shards + 1

    def receive(self, gen: Any) -> Iterator[tuple[Any, Any]]:
        """The next result of a ready shard: (key, outcome), or Failed items when the shard or its replica
        failed. Removes a finished shard; on a lost replica, every shard it held."""
        import ray

        shard = self.running[gen]
        try:
            key, outcome, usage = ray.get(next(gen))
        except StopIteration:
            del self.running[gen]
            if shard.pending:   # cannot happen with Replica's methods; never lose items silently
                yield from self.fail(shard.pending, f"{shard.slot.name} ended a shard without them")
            return
        except ray.exceptions.RayActorError as e:
            yield from self.lose(shard.slot, describe_error(e))
            return
        except ray.exceptions.RayError as e:   # the shard's method raised: the replica lives on
            del self.running[gen]
            yield from self.fail(shard.pending, f"{shard.slot.name}: {describe_error(e)}")
            return
        self.d.usage[(shard.slot.index, shard.slot.generation)] = usage
        if self.d.on_usage is not None:
            self.d.on_usage()
        del shard.pending[key]
        yield key, outcome

    def fail(self, items: dict[Any, Any], why: str) -> Iterator[tuple[Any, Failed]]:
        """One failed attempt for each item: Failed(final) at max_attempts, else queued again at the front."""
        again = []
        for key, payload in items.items():
            self.attempts[key] += 1
            if self.attempts[key] >= self.d.max_attempts:
                yield key, Failed(f"failed {self.attempts[key]} times; last: {why}", final=True)
            else:
                again.append((key, payload))
        self.d.retried += len(again)
        self.retry.extendleft(reversed(again))

    def lose(self, slot: Slot, why: str) -> Iterator[tuple[Any, Failed]]:
        """The slot's replica is gone: fail what it held and start a replacement (if any is left)."""
        for gen in [g for g, shard in self.running.items() if shard.slot is slot]:
            yield from self.fail(self.running.pop(gen).pending, f"{slot.name} lost ({why})")
        self.d.pool.replace(slot)
