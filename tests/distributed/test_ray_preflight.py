"""`--ray`'s bad input fails before any model loads, as one line on stderr and exit status 2; and `import sglite`
(even naming sgl.RayRuntime, building one, importing sglite.distributed) never imports Ray."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

import sglite as sgl
from sglite.extract import main

from ..extract_jobs import person_job


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_import_sglite_and_building_a_ray_runtime_import_no_ray():
    code = ("import sys, sglite as sgl; rt = sgl.RayRuntime(replicas=2, num_threads=1); "
            "import sglite.distributed.dispatcher, sglite.distributed.jobs, sglite.distributed.cluster; "
            "assert 'ray' not in sys.modules, 'ray imported'; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def _one_line_exit_2(capsys, argv) -> str:
    t0 = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "starting" not in err[0] and "loading" not in err[0]
    assert time.monotonic() - t0 < 30
    return err[0]


@pytest.mark.parametrize("extra, says", [
    (["--ray", "--replicas", "0"], "--replicas must be >= 1, got 0"),
    (["--ray", "--shard-size", "0"], "--shard-size must be >= 1, got 0"),
    (["--replicas", "2"], "--replicas and --shard-size go with --ray"),
    (["--ray", "--url", "http://127.0.0.1:1"], "--ray and --url"),
    (["--ray", "not-an-address"], "is not host:port"),
])
def test_bad_ray_options_fail_in_one_line(tmp_path, capsys, extra, says):
    assert says in _one_line_exit_2(capsys, person_job(tmp_path, 2) + extra)


def test_an_unreachable_cluster_fails_in_one_line_within_seconds(tmp_path, capsys):
    line = _one_line_exit_2(capsys, person_job(tmp_path, 2) + ["--ray", f"127.0.0.1:{_free_port()}"])
    assert "cannot reach the Ray cluster" in line and "ray start --head" in line


def test_ray_not_installed_fails_in_one_line_naming_the_extra(tmp_path):
    argv = person_job(tmp_path, 2) + ["--ray"]
    code = ("import sys; sys.modules['ray'] = None\n"   # any `import ray` now raises ImportError
            "from sglite.extract import main\n"
            f"sys.exit(main({argv!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert 'pip install "sglite[ray]"' in r.stderr


def test_ray_runtime_refuses_bad_counts_at_construction():
    with pytest.raises(ValueError, match="replicas must be an int >= 1"):
        sgl.RayRuntime(replicas=0)
    with pytest.raises(ValueError, match="num_threads must be an int >= 1"):
        sgl.RayRuntime(num_threads=0)


def test_without_a_replica_count_the_cluster_is_filled():
    from sglite.backend.ray_runtime import _fill

    assert _fill({"CPU": 8.0}, 0, 2) == 4            # one per num_threads CPUs
    assert _fill({"CPU": 16.0, "GPU": 4.0}, 1, 1) == 4   # one per GPU on CUDA
    assert _fill({"CPU": 1.0}, 0, 4) == 1            # at least one
