"""A local Ray cluster of 2 CPUs (one per session), the tiny random-weight model written to a folder the
replicas load by path, and the extraction job the tests run (the schema bounds every field, so each record
finishes within --max-tokens)."""
from __future__ import annotations

import json
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


def job_args(folder: Path, n_docs: int) -> list[str]:
    """`sglite extract` arguments for n_docs short person documents (files written into folder)."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"]}
    (folder / "s.json").write_text(json.dumps(schema))
    (folder / "p.txt").write_text("Extract the person named in the document and their age, as JSON.")
    with open(folder / "d.jsonl", "w") as f:
        for i in range(n_docs):
            f.write(json.dumps({"id": f"d{i:02d}", "text": f"Person {i} is {20 + i} years old."}) + "\n")
    return ["--schema", str(folder / "s.json"), "--prompt", str(folder / "p.txt"), "--input",
            str(folder / "d.jsonl"), "--output", str(folder / "o.jsonl"), "--max-tokens", "32"]


def output_lines(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "o.jsonl").read_text().splitlines()]
