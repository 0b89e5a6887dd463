"""`sglite batch` keeps the weight plan of its job as `sglite extract` does (OUTPUT.job.json): a new job records the
plan its engine runs, `--resume` runs the recorded plan even when the machine's default would now choose another,
and an explicit --weights naming another plan on resume is an error naming both, before the model loads. The
engine is the tiny random-weight model; what stands in for the machine's choice is the plan it is labelled with
when asked for "auto"."""
from __future__ import annotations

import json


import sglite.runtime.engine.engine as engine_module
from sglite.extract.batch import main
from sglite.extract.jobfile import job_path


def _args(tmp_path, n: int) -> list[str]:
    """A batch file of n text completions (custom_ids r0.., greedy), written again with each call."""
    rows = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
             "body": {"prompt": f"Item {i} is", "max_tokens": 4, "temperature": 0}} for i in range(n)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--device", "cpu"]


def test_resume_runs_the_recorded_plan_not_todays_default(tmp_path, machine, capsys):
    out = tmp_path / "out.jsonl"
    assert main(_args(tmp_path, 2)) == 0
    assert json.loads(job_path(out).read_text())["weights"] == "bf16"
    machine["auto"] = "fp32"                 # the machine's default now differs
    assert main(_args(tmp_path, 4) + ["--resume"]) == 0
    assert machine["asked"] == ["auto", "bf16"]
    assert str(machine["engines"][-1].model.net.plan) == "bf16"
    assert sorted(json.loads(x)["custom_id"] for x in out.read_text().splitlines()) == ["r0", "r1", "r2", "r3"]
    assert json.loads(job_path(out).read_text())["weights"] == "bf16"
    # an explicit --weights that is the same plan is fine; another one is an error naming both, before loading
    assert main(_args(tmp_path, 5) + ["--resume", "--weights", "bf16"]) == 0
    assert main(_args(tmp_path, 6) + ["--resume", "--weights", "w4a16+bf16"]) == 2
    err = capsys.readouterr().err
    assert "--weights w4a16+bf16 differs from the plan bf16" in err and str(job_path(out)) in err
    assert machine["asked"] == ["auto", "bf16", "bf16"]
    assert len(out.read_text().splitlines()) == 5


def test_a_new_job_records_the_plan_it_ran_and_overwrite_records_again(tmp_path, machine):
    out = tmp_path / "out.jsonl"
    assert main(_args(tmp_path, 1) + ["--weights", "fp32"]) == 0
    assert json.loads(job_path(out).read_text())["weights"] == "fp32"
    assert main(_args(tmp_path, 1) + ["--overwrite"]) == 0
    assert json.loads(job_path(out).read_text())["weights"] == "bf16"


def test_an_engine_running_another_plan_than_the_recorded_one_is_refused(tmp_path, machine, capsys):
    out = tmp_path / "out.jsonl"
    assert main(_args(tmp_path, 1)) == 0
    other = engine_module.Engine(weights="fp32")
    assert main(_args(tmp_path, 2) + ["--resume"], engine=other) == 2
    err = capsys.readouterr().err
    assert "runs the weight plan fp32" in err and "started with bf16" in err
    assert len(out.read_text().splitlines()) == 1
