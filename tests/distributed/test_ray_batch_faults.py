"""`sglite batch --ray`'s job (sglite.distributed.jobs.batch_requests) when a replica is lost: its requests run on
another replica and each custom_id comes back once; one lost twice is a replica_lost line. Stand-in replicas
that hold no engine answer each request with its custom_id, so this runs in seconds."""
from __future__ import annotations

import os
from pathlib import Path

from sglite.distributed.dispatcher import Dispatcher
from sglite.distributed.jobs import batch_requests
from sglite.distributed.pool import ReplicaPool, ReplicaSpec
from sglite.extract.batch_lines import BatchRequest, output_line


class CrashingReplica:
    """Its process exits on a request whose body says "crash" (once per marker file, or always)."""

    def __init__(self, model, engine_options):
        pass

    def ready(self):
        return {"pid": os.getpid()}

    def batch(self, shard, max_in_flight):
        for key, req in shard:
            marker = req.body.get("crash")
            if marker == "always" or (marker and not Path(marker).exists()):
                if marker != "always":
                    Path(marker).write_text("crashed once")
                os._exit(1)
            yield key, output_line(req, 200, {"echo": key}, None), {}


def test_a_lost_replicas_requests_are_answered_elsewhere_once(tmp_path, ray_cluster):
    reqs = [BatchRequest(f"r{i}", "/v1/completions", {"prompt": str(i)}, f"in:{i}") for i in range(8)]
    reqs[3] = BatchRequest("r3", "/v1/completions", {"crash": str(tmp_path / "m")}, "in:3")
    reqs.append(BatchRequest("doomed", "/v1/completions", {"crash": "always"}, "in:9"))
    pool = ReplicaPool(ReplicaSpec(num_cpus=1), replicas=2, max_restarts=2, actor_class=CrashingReplica).start()
    try:
        # one request in flight per replica: a crash loses only the request that caused it
        lines = list(batch_requests(Dispatcher(pool, shard_size=1, shards_per_replica=1), reqs, 4))
    finally:
        pool.shutdown()
    by_id = {line["custom_id"]: line for line in lines}
    assert len(lines) == len(by_id) == 9                         # each custom_id exactly once
    assert by_id["r3"]["response"]["body"] == {"echo": "r3"}     # crashed once, answered on retry
    assert by_id["doomed"]["response"] is None and by_id["doomed"]["error"]["code"] == "replica_lost"
    assert all(by_id[f"r{i}"]["response"]["status_code"] == 200 for i in range(8))
