"""`sglite eval`: the default rules, misses and inventions, rule overrides, the paired sign test, --min-accuracy,
and the same figures as the bench's accuracy rules on perturbed records of the bundled gold."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from sglite.cli import main as sglite_main
from sglite.extract.evaluation import evaluate, paired, sign_test_p
from sglite.extract.inputs import id_key

ROOT = Path(__file__).resolve().parents[2]
GOLD = [{"id": "a", "name": "Ann Lee", "age": 31, "tags": ["x", "y"], "city": None},
        {"id": "b", "name": "Bo", "age": 7, "tags": ["z"], "city": "Oslo"}]


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _keyed(rows):
    return {id_key(r["id"]): r for r in rows}


def test_default_rules_misses_and_inventions():
    out = [{"id": "a", "record": {"name": " ann  LEE", "age": 31.1, "tags": ["y", "x"], "city": "Paris"}},
           {"id": "b", "record": {"name": "Bo", "age": 8, "tags": ["z", "q"], "city": None}}]
    ev = evaluate(_keyed(out), _keyed(GOLD))
    s = {name: (f.right, f.scored, f.misses, f.inventions) for name, f in ev.fields.items()}
    assert s == {"name": (2, 2, 0, 0),     # case and spacing ignored
                 "age": (1, 2, 0, 0),      # 31.1 is within 0.5% of 31; 8 is not 7
                 "tags": (1, 2, 0, 0),     # sets: order ignored, an extra item is wrong
                 "city": (0, 1, 1, 1)}     # b: null where gold has Oslo (a miss); a: Paris where gold is null
    assert (ev.total.right, ev.total.scored) == (4, 7)


def test_an_error_line_or_missing_id_gets_every_field_wrong():
    ev = evaluate(_keyed([{"id": "a", "record": None, "error": "x"}]), _keyed(GOLD), ["name", "age", "tags", "city"])
    assert ev.total.right == 0 and ev.total.scored == 7 and ev.no_record == 2


def test_cli_rules_pairing_and_min_accuracy(tmp_path, capsys):
    gold = _write(tmp_path / "g.jsonl", GOLD)
    a = _write(tmp_path / "a.jsonl", [{"id": "a", "record": {"name": "Ann Lee", "age": 31}},
                                      {"id": "b", "record": {"name": "Bo", "age": 7}}])
    b = _write(tmp_path / "b.jsonl", [{"id": "a", "record": {"name": "Ann", "age": 33}},
                                      {"id": "b", "record": {"name": "Bo", "age": 7}}])
    assert sglite_main(["eval", a, b, "--gold", gold, "--min-accuracy", "1.0"]) == 0
    out = capsys.readouterr().out
    assert "4/4 (100%)" in out and "2/4 (50%)" in out
    assert "2 : 0" in out and f"{sign_test_p(2, 0):.3f}" in out
    assert sglite_main(["eval", b, "--gold", gold, "--min-accuracy", "0.9"]) == 1
    assert "under --min-accuracy" in capsys.readouterr().err
    # a looser number rule for age makes 33 right for 31
    assert sglite_main(["eval", b, "--gold", gold, "--rule", "age=number:0.1", "--min-accuracy", "0.75"]) == 0
    assert sglite_main(["eval", b, "--gold", gold, "--rule", "age=nonsense"]) == 2
    assert "rule 'nonsense'" in capsys.readouterr().err


def test_sign_test_values():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == pytest.approx(2 / 32)
    assert sign_test_p(3, 3) == 1.0


def test_reproduces_the_bench_accuracy_rules():
    """bench/extraction_accuracy.py scores through evaluation with bench/accuracy.py's matchers: on perturbed
    records of the bundled gold both give the same counts per field, and the same pairing."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import accuracy
        import extraction_accuracy
    finally:
        sys.path.remove(str(ROOT / "bench"))
    gold = accuracy.load_gold(ROOT / "examples" / "data" / "reports_gold.jsonl")
    rng = random.Random(7)

    def perturbed():
        records = {}
        for doc_id, g in gold.items():
            if rng.random() < 0.1:
                records[doc_id] = None
                continue
            rec = {k: v for k, v in g.items() if k not in ("id", "note")}
            for k, v in rec.items():
                if rng.random() < 0.3:
                    rec[k] = (v * rng.choice([1.004, 1.2, -1, 100]) if isinstance(v, float) else
                              rng.choice([None, str(v).lower() if isinstance(v, str) else v, "Q9 1999", "the "
                                          + str(v) + " Inc"]))
            records[doc_id] = rec
        return records

    a, b = perturbed(), perturbed()
    theirs, ours = accuracy.score_job(a, gold), extraction_accuracy.evaluation(a, gold)
    for name in accuracy.GOLD_FIELDS:
        assert theirs[name] == (ours.fields[name].right, ours.fields[name].scored), name
    assert theirs["total"] == (ours.total.right, ours.total.scored)
    assert paired(ours, extraction_accuracy.evaluation(b, gold))["total"] == accuracy.paired(a, b, gold)
