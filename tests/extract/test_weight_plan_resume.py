"""The job's weight plan: `sglite extract` records the plan its engine runs beside the output, `--resume` runs the
recorded plan even when the machine's default would now choose another, and an explicit --weights naming another
plan on resume is an error naming both. The engine is the tiny random-weight model; what stands in for the
machine's choice is the plan it is labelled with when asked for "auto"."""
from __future__ import annotations

import json


import sglite.runtime.engine.engine as engine_module
from sglite.extract import main
from sglite.extract.jobfile import job_path

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}}, "required": ["name"]}


def _args(tmp_path, n):
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "p.txt").write_text("Extract the name.")
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"Ann{i} is here."}) + "\n"
                                              for i in range(n)))
    return ["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"), "--input",
            str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "o.jsonl"), "--device", "cpu", "--max-tokens",
            "12", "--no-spans"]


def test_resume_runs_the_recorded_plan_not_todays_default(tmp_path, machine, capsys):
    out = tmp_path / "o.jsonl"
    main(_args(tmp_path, 2))
    assert json.loads(job_path(out).read_text())["weights"] == "bf16"
    _args(tmp_path, 4)                     # two more documents
    machine["auto"] = "fp32"               # the machine's default now differs
    main(_args(tmp_path, 4) + ["--resume"])
    assert machine["asked"] == ["auto", "bf16"]
    assert str(machine["engines"][-1].model.net.plan) == "bf16"
    assert len(out.read_text().splitlines()) == 4
    # an explicit --weights that is the same plan is fine; another one is an error naming both, before loading
    assert main(_args(tmp_path, 4) + ["--resume", "--weights", "bf16"]) == 0
    assert main(_args(tmp_path, 5) + ["--resume", "--weights", "w4a16+bf16"]) == 2
    err = capsys.readouterr().err
    assert "--weights w4a16+bf16" in err and "bf16" in err and str(job_path(out)) in err
    assert machine["asked"] == ["auto", "bf16"]


def test_a_new_job_records_the_plan_it_ran_and_overwrite_records_again(tmp_path, machine):
    out = tmp_path / "o.jsonl"
    main(_args(tmp_path, 1) + ["--weights", "fp32"])
    assert json.loads(job_path(out).read_text())["weights"] == "fp32"
    main(_args(tmp_path, 1) + ["--overwrite"])
    assert json.loads(job_path(out).read_text())["weights"] == "bf16"


def test_a_backend_running_another_plan_than_the_recorded_one_is_refused(tmp_path, machine, capsys):
    import sglite as sgl
    out = tmp_path / "o.jsonl"
    main(_args(tmp_path, 1))
    backend = sgl.Runtime(engine=engine_module.Engine(weights="fp32"))
    assert main(_args(tmp_path, 2) + ["--resume"], backend=backend) == 2
    err = capsys.readouterr().err
    assert "fp32" in err and "bf16" in err and len(out.read_text().splitlines()) == 1
