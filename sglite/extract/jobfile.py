"""The job file beside an output (`OUTPUT.job.json`): what a job was started with that its outputs depend on and
that this machine may otherwise decide differently later, so that `--resume` continues the same job (`sglite
extract` and `sglite batch` alike: job_weights before the model loads, record_plan once it runs). Today that
is the weight plan (`str(WeightPlan)`): "auto" measures the machine (or, when it is busy, reads its flags), and a
resumed job, or a replica on another node, could get another plan and so other greedy outputs."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .setup_error import SetupError


def job_path(output: Path) -> Path:
    return output.with_name(output.name + ".job.json")


def read_job(output: Path) -> dict[str, Any]:
    """The job file's fields ({} when there is none)."""
    path = job_path(output)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SetupError(f"{path}: cannot read the job file ({e}); remove it to let this run decide again") from None
    if not isinstance(data, dict):
        raise SetupError(f"{path}: not a job file (a JSON object); remove it to let this run decide again")
    return data


def write_job(output: Path, fields: dict[str, Any]) -> None:
    """Write the job file whole (a temporary file renamed over it)."""
    path = job_path(output)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(fields, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def resume_weights(asked: str, recorded: str | None, output: Path) -> str:
    """The weights a resumed job runs with: the recorded plan unless none was recorded; an explicit --weights
    that names another plan is an error naming both."""
    if recorded is None:
        return asked
    if asked == "auto":
        return recorded
    from ..runtime.weight_plan import WeightPlan
    try:
        same = WeightPlan.parse(asked) == WeightPlan.parse(recorded)
    except ValueError as e:
        raise SetupError(f"--weights {asked}: {e}") from None
    if not same:
        raise SetupError(f"--weights {asked} differs from the plan {recorded} that {output} was started with "
                         f"(recorded in {job_path(output)}); resume without --weights, or pass --weights {recorded}")
    return recorded


def job_weights(output: Path, resume: bool, asked: str, remote: bool) -> tuple[dict[str, Any], str]:
    """(the job file's fields, {} unless resuming; the weights this run loads its model with): on --resume the
    recorded plan (resume_weights), except for a `remote` server, which runs what it runs."""
    recorded = read_job(output) if resume else {}
    if recorded.get("weights") and not remote:
        return recorded, resume_weights(asked, recorded["weights"], output)
    return recorded, asked


def record_plan(backend: Any, recorded: dict[str, Any], output: Path) -> None:
    """Keep the weight plan the job runs in the job file, for --resume; a backend that runs another plan than the
    one recorded is refused (its outputs would not continue the job's)."""
    plan = weights_of(backend)
    if plan is None or plan == recorded.get("weights"):
        return
    if recorded.get("weights"):
        raise SetupError(f"the model runs the weight plan {plan}, but {output} was started with "
                         f"{recorded['weights']} (recorded in {job_path(output)})")
    try:
        write_job(output, {**recorded, "weights": plan})
    except OSError as e:
        raise SetupError(f"cannot write {job_path(output)} ({e})") from None


def weights_of(backend: Any) -> str | None:
    """The weight plan a backend runs, as str(WeightPlan): an Engine's, a Runtime's engine's, a RayRuntime's
    replicas' (None: it cannot say, e.g. a server over HTTP)."""
    pool = getattr(backend, "pool", None)
    if pool is not None:
        return getattr(pool, "weights", None)
    engine = getattr(backend, "engine", backend)
    plan = getattr(getattr(getattr(engine, "model", None), "net", None), "plan", None)
    return None if plan is None else str(plan)
