"""A local Ray cluster of 2 CPUs (one per session), the tiny random-weight model written to a folder the
replicas load by path. The extraction job the tests run is tests/extract_jobs.py's person job."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from .tiny_checkpoint import write_tiny_checkpoint

ENGINE_OPTIONS = {"max_total_tokens": 16384, "max_running_requests": 16, "weights": "bf16"}


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))
