"""`sglite extract --ray` and `run_batch(backend=RayRuntime)` on a local Ray cluster, two replicas of the tiny
model: the same records as a local run of the same job (greedy; bf16 linears are batch-invariant), and a replica
killed mid-job loses nothing. The kill test runs last: it uses up replica 0's restart."""
from __future__ import annotations

import threading
import time

import pytest

import sglite as sgl
from sglite.extract import main

from ..extract_jobs import output_lines, person_job
from .conftest import ENGINE_OPTIONS


@pytest.fixture(scope="module")
def ray_runtime(ray_cluster, tiny_path):
    with sgl.RayRuntime(str(tiny_path), replicas=2, num_threads=1, **ENGINE_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="module")
def local_runtime(tiny_path):
    with sgl.Runtime(str(tiny_path), num_threads=1, **ENGINE_OPTIONS) as rt:
        yield rt


def test_records_match_a_local_run_of_the_same_job(tmp_path, ray_runtime, local_runtime):
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    assert main(person_job(tmp_path / "local", 12), backend=local_runtime) == 0
    assert main(person_job(tmp_path / "ray", 12) + ["--ray", "--shard-size", "3"], backend=ray_runtime) == 0
    local = {x["id"]: x for x in output_lines(tmp_path / "local")}
    remote = output_lines(tmp_path / "ray")
    assert sorted(x["id"] for x in remote) == sorted(local)
    assert {x["id"]: x for x in remote} == local
    assert {slot for slot, _ in ray_runtime.dispatcher.usage} == {0, 1}   # both replicas ran documents
    assert ray_runtime.usage.cached_tokens > 0                             # the instructions were prefix hits


@sgl.function
def person(s, text):
    s += sgl.system("You name the person in the sentence. Reply with the name only, capitalized.")
    s += sgl.user(text)
    s += sgl.assistant(sgl.gen("name", max_tokens=8, regex="[A-Z][a-z]{1,6}"))


def test_run_batch_on_ray_matches_a_local_run_batch(ray_runtime, local_runtime):
    calls = [{"text": f"Person {i} is {20 + i} years old."} for i in range(10)]
    local = person.run_batch(calls, backend=local_runtime, temperature=0)
    remote = person.run_batch(calls, backend=ray_runtime, temperature=0)
    assert [s.error() for s in remote] == [None] * len(calls)
    assert [s["name"] for s in remote] == [s["name"] for s in local]
    assert [s.text() for s in remote] == [s.text() for s in local]
    assert remote[0].get_meta_info("name")["finish_reason"] == local[0].get_meta_info("name")["finish_reason"]


def test_one_program_at_a_time_goes_to_a_replica(ray_runtime, local_runtime):
    text = "Person 7 is 27 years old."
    remote = person.run(text=text, backend=ray_runtime, temperature=0)
    local = person.run(text=text, backend=local_runtime, temperature=0)
    assert remote.error() is None and remote["name"] == local["name"]


def test_a_replica_killed_mid_job_loses_nothing(tmp_path, ray_runtime):
    import ray

    n_docs, kill_after = 30, 4
    args = person_job(tmp_path, n_docs) + ["--ray", "--shard-size", "2"]
    out = tmp_path / "o.jsonl"
    victim = ray_runtime.pool.slots[0].actor
    lines_at_kill = []

    def kill_mid_job():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = out.read_bytes().count(b"\n") if out.exists() else 0
            if done >= kill_after:
                lines_at_kill.append(done)
                ray.kill(victim)
                return
            time.sleep(0.005)

    retried = ray_runtime.dispatcher.retried
    killer = threading.Thread(target=kill_mid_job, daemon=True)
    killer.start()
    assert main(args, backend=ray_runtime) == 0
    killer.join()
    assert lines_at_kill and lines_at_kill[0] < n_docs, "the kill landed mid-job"
    lines = output_lines(tmp_path)
    assert sorted(x["id"] for x in lines) == [f"d{i:02d}" for i in range(n_docs)]   # each id exactly once
    assert all(set(x) - {"confidence"} == {"id", "record", "spans"} for x in lines), [x for x in lines if "error" in x]
    assert ray_runtime.dispatcher.retried > retried     # the dead replica's unfinished documents ran again
    assert ray_runtime.pool.slots[0].generation == 1   # the pool started a replica in the dead one's place
