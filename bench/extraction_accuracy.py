"""Field accuracy of the main job, field by field: sglite under each JSON whitespace mode beside llama.cpp's server
on the same GGUF, the same chat messages and the same schema, in one run.

    python bench/extraction_accuracy.py                                  # modes compact,standard,flexible
    python bench/extraction_accuracy.py --modes standard --skip-llamacpp --limit 5
    python bench/extraction_accuracy.py --modes standard --skip-llamacpp --sets bundled,synthetic \
        --dry default,0,0.8+nc,0.5+nc                     # JSON DRY defaults compared on both report sets

For every system: outputs that validate, gold fields right per field and in total, scored by `sglite eval`'s
evaluation (sglite/extract/evaluation.py) with bench/accuracy.py's rules for company, period and currency (its
number rule is eval's default), and few-shot leaks: records whose `guidance` or a `risks` item is copied from the example program's few-shot
answers (text the report itself does not contain). llama-server gets `response_format: json_schema` with the
example's pydantic schema; its grammar allows bounded whitespace (llama.cpp's json-schema-to-grammar). The
sglite Engine is built once per mode with `json_whitespace=<mode>` and otherwise default options; sglite runs the
example as shipped, its grounded fields (GROUNDED: values taken from the report) on, and with `--plain` also
without them (the schema alone, as llama.cpp gets it).

Report sets (`--sets`): "bundled", the 20 hand-written reports (examples/data/reports.jsonl, gold
reports_gold.jsonl); "synthetic", 80 generated ones whose gold values are known by construction
(bench/synthetic_reports.py writes examples/data/synthetic_reports{,_gold}.jsonl); "formats", 16 hand-written
ones in other layouts (tables in text, key-value lists, several periods, restated figures) and languages
(German, French, Spanish, Japanese, Chinese with HK dollars; examples/data/format_reports{,_gold}.jsonl).

`--dry` runs each sglite mode under several defaults for JSON-schema DRY (the job's gen sets none, so the engine's
default applies): "default" is the engine as shipped; "M" sets the default multiplier to M (0: off); "M+nc" also
makes the default sequence breakers "\n" and ":" only (llama.cpp's '"' and '*' dropped), "M+ll" llama.cpp's four;
"+aN" sets the allowed length to N ("0.8+nc+a3").
The configurations run one after another on one Engine, every set in each, and the first is the reference of a
paired comparison: per gold field, how many only the reference got right and how many only the other did, with
the two-sided sign-test p-value of that split (fields both got right or both wrong say nothing about the
difference).

`--outputs DIR` writes each system's records as `sglite extract` output files (DIR/<set>.<system>.jsonl), so
`sglite eval DIR/bundled.sglite_standard.jsonl --gold examples/data/reports_gold.jsonl --rule
company=accuracy:company_matches --rule period=accuracy:period_matches --rule currency=exact` (bench/ on
PYTHONPATH) prints the same figures."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from accuracy import GOLD_FIELDS, GOLD_FILES, company_matches, load_gold, period_matches  # noqa: E402
from vs_llamacpp import (DEFAULT_BIN_DIR, LlamaServer, SgliteSide, chat_messages, find_binaries,  # noqa: E402
                         load_example)

from sglite.extract.confidence import BUCKET_NAMES  # noqa: E402
from sglite.extract.evaluation import Evaluation, evaluate, paired, same_exact, sign_test_p  # noqa: E402
from sglite.extract.inputs import id_key  # noqa: E402

MODES = ("compact", "standard", "flexible", "any")
RULES = {"company": company_matches, "period": period_matches, "currency": same_exact}   # numbers: eval's default
SETS = {"bundled": ("reports.jsonl", GOLD_FILES["bundled"]),
        "synthetic": ("synthetic_reports.jsonl", GOLD_FILES["synthetic"]),
        "formats": ("format_reports.jsonl", GOLD_FILES["formats"])}
BREAKER_SETS = {"nc": ("\n", ":"), "ll": ("\n", ":", '"', "*")}


class DryDefault:
    """One `--dry` configuration, applied to a live Engine: the multiplier by patching the engine's default for
    JSON-schema requests (sampling_params), breakers and allowed length by handing the sampler's DRY step a copy of
    each request's params where the request left DRY to that default."""

    def __init__(self, spec: str):
        self.name = spec
        self.multiplier: float | None = None
        self.changes: dict[str, Any] = {}
        if spec != "default":
            mult, *extras = spec.split("+")
            self.multiplier = float(mult)
            for extra in extras:
                if extra in BREAKER_SETS:
                    self.changes["dry_sequence_breakers"] = BREAKER_SETS[extra]
                elif extra[:1] == "a" and extra[1:].isdigit():
                    self.changes["dry_allowed_length"] = int(extra[1:])
                else:
                    raise ValueError(f"--dry {spec!r}: {extra!r} is neither a breaker set {list(BREAKER_SETS)} "
                                     f"nor aN (allowed length N)")

    def apply(self, engine):
        """Patches `engine` (and the module default); returns a function that undoes it."""
        import dataclasses

        from sglite.runtime.engine import sampling_params

        old_mult = sampling_params.CONSTRAINED_DRY_MULTIPLIER
        sampler = engine.core.processor.sampler
        if self.multiplier is not None:
            sampling_params.CONSTRAINED_DRY_MULTIPLIER = self.multiplier
        if self.changes:
            plain, changes = type(sampler)._apply_dry, self.changes

            def apply_dry(logits, reqs):
                swapped = [(r, r.params) for r in reqs
                           if r.params.dry_multiplier is None and r.params.json_schema is not None]
                for r, p in swapped:
                    r.params = dataclasses.replace(p, **changes)
                try:
                    plain(sampler, logits, reqs)
                finally:
                    for r, p in swapped:
                        r.params = p
            sampler._apply_dry = apply_dry

        def undo() -> None:
            sampling_params.CONSTRAINED_DRY_MULTIPLIER = old_mult
            sampler.__dict__.pop("_apply_dry", None)
        return undo


def few_shot_leaks(example, docs: list[dict], records: dict[str, dict | None]) -> int:
    """Records with guidance or a risk copied from a few-shot answer that their own report does not contain."""
    shots = [record for _, record in example.FEW_SHOT]
    copied_guidance = {s["guidance"] for s in shots}
    copied_risks = {r for s in shots for r in s["risks"]}
    text = {d["id"]: d["text"] for d in docs}
    leaks = 0
    for doc_id, rec in records.items():
        if not isinstance(rec, dict):
            continue
        got = [rec.get("guidance")] if rec.get("guidance") in copied_guidance else []
        got += [r for r in rec.get("risks") or [] if r in copied_risks]
        if any(isinstance(g, str) and g not in text[doc_id] for g in got):
            leaks += 1
    return leaks


def evaluation(records: dict[str, dict | None], gold: dict[str, dict],
               confidence: dict[str, dict] | None = None) -> Evaluation:
    """`sglite eval`'s scores of one job over the reports it ran (each must have gold values); with
    `confidence` ({report id: {pointer: p}}), also by confidence bucket."""
    missing = sorted(set(records) - set(gold))
    if missing:
        raise KeyError(f"no gold values for report id(s) {missing}")
    confidence = confidence or {}
    output = {id_key(doc_id): {"id": doc_id, "record": record, "confidence": confidence.get(doc_id) or {}}
              for doc_id, record in records.items()}
    return evaluate(output, {id_key(doc_id): gold[doc_id] for doc_id in records}, list(GOLD_FIELDS), RULES)


def print_accuracy_table(evals: dict[str, Evaluation]) -> None:
    """One row per field, one column per system, as a markdown table."""
    names = list(evals)
    print("| field | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for field in (*GOLD_FIELDS, "total"):
        cells = []
        for name in names:
            s = evals[name].total if field == "total" else evals[name].fields[field]
            cells.append(f"{s.right}/{s.scored} ({s.accuracy:.0%})" if s.scored else "–")
        label = f"**{field}**" if field == "total" else field
        print(f"| {label} | " + " | ".join(cells) + " |")


def print_confidence_table(evals: dict[str, Evaluation]) -> None:
    """Gold values right by the model's confidence in them, one column per system that reports confidence."""
    names = [name for name in evals if evals[name].confidence]
    if not names:
        return
    print("\ngold values right by confidence bucket (sglite's field confidence)\n")
    print("| confidence | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    counts = {name: evals[name].by_confidence() for name in names}
    for b in BUCKET_NAMES:
        cells = [f"{r}/{n} ({r / n:.0%})" if n else "–" for r, n in (counts[name][b] for name in names)]
        print(f"| {b} | " + " | ".join(cells) + " |")


def write_outputs(folder: Path, set_name: str, system: str, records: dict[str, dict | None]) -> Path:
    """The records as an `sglite extract` output file ({"id", "record"} lines), for `sglite eval`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{set_name}.{''.join(c if c.isalnum() else '_' for c in system)}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, record in records.items():
            f.write(json.dumps({"id": doc_id, "record": record}, ensure_ascii=False) + "\n")
    return path


def write_dump(path: Path, set_name: str, system: str, records: dict[str, dict | None]) -> None:
    """Appends one JSONL line per record: {"set", "system", "id", "record"} (bench/accuracy.py rescores them)."""
    with open(path, "a", encoding="utf-8") as f:
        for doc_id, record in records.items():
            f.write(json.dumps({"set": set_name, "system": system, "id": doc_id, "record": record},
                               ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="compact,standard,flexible",
                    help=f"comma list of sglite json_whitespace modes, of {MODES}")
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2 Q4_1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N reports")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    ap.add_argument("--ctx-per-slot", type=int, default=2048)
    ap.add_argument("--dump", type=Path, default=None, help="write every record (JSONL: system, id, record)")
    ap.add_argument("--outputs", type=Path, default=None, metavar="DIR",
                    help="write each system's records as sglite extract output files, for sglite eval")
    ap.add_argument("--sets", default="bundled", help=f"comma list of report sets, of {list(SETS)}")
    ap.add_argument("--plain", action="store_true",
                    help="also run each sglite mode without the example's grounded fields (the schema alone)")
    ap.add_argument("--dry", default="default",
                    help="comma list of JSON DRY defaults to run each sglite mode under: default, M, M+nc, M+ll")
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        ap.error(f"--modes takes {MODES}, got {args.modes!r}")
    sets = args.sets.split(",")
    if not set(sets) <= set(SETS):
        ap.error(f"--sets takes {list(SETS)}, got {args.sets!r}")
    try:
        drys = [DryDefault(spec) for spec in args.dry.split(",")]
    except ValueError as e:
        ap.error(str(e))
    exes = None if args.skip_llamacpp else find_binaries(args.llamacpp_bin)   # fail before any work

    from sglite.runtime.model_source import resolve_model_path

    gguf = resolve_model_path(args.model)
    example = load_example()
    data = ROOT / "examples" / "data"
    docs = {name: example.load_reports(data / SETS[name][0], args.limit) for name in sets}
    gold = {name: load_gold(data / SETS[name][1]) for name in sets}
    print(f"model: {gguf.name}; sets {', '.join(f'{k} ({len(v)} reports)' for k, v in docs.items())}; "
          f"threads {args.threads}; load average {os.getloadavg()[0]:.2f}", flush=True)

    jobs: dict[str, dict[str, Any]] = {name: {} for name in sets}    # set -> system -> JobResult
    if args.dump:
        args.dump.write_text("")
    if exes:
        print("llama.cpp: llama-server ...", file=sys.stderr, flush=True)
        with LlamaServer(exes["llama-server"], gguf, args.threads, args.ctx_per_slot) as server:
            for name in sets:
                jobs[name]["llama.cpp"] = server.main_job(example, docs[name])
                if args.dump:
                    write_dump(args.dump, name, "llama.cpp", jobs[name]["llama.cpp"].records)
    for mode in modes:
        side = SgliteSide(gguf, {"num_threads": args.threads, "json_whitespace": mode})
        try:
            for dry in drys:
                system = f"sglite {mode}" + ("" if args.dry == "default" else f", DRY {dry.name}")
                undo = dry.apply(side.engine)
                try:
                    for grounded in (True, False) if args.plain else (True,):
                        label = system + ("" if grounded else ", plain")
                        for name in sets:
                            print(f"{label} on {name} ...", file=sys.stderr, flush=True)
                            jobs[name][label] = job = side.main_job(example, docs[name], grounded)
                            if args.dump:    # as each job ends, so a run cut short keeps what it finished
                                write_dump(args.dump, name, label, job.records)
                finally:
                    undo()
        finally:
            side.shutdown()

    for name in sets:
        n = len(docs[name])
        scores = {system: evaluation(job.records, gold[name], job.confidence) for system, job in jobs[name].items()}
        if args.outputs:
            for system, job in jobs[name].items():
                write_outputs(args.outputs, name, system, job.records)
        print(f"\n### {name}: {n} reports ({SETS[name][0]})\n")
        print("| system | valid | gold fields right | few-shot leaks | wall s |")
        print("|---|---:|---:|---:|---:|")
        for system, job in jobs[name].items():
            right, total = scores[system].total.right, scores[system].total.scored
            print(f"| {system} | {job.valid}/{n} | {right}/{total} | "
                  f"{few_shot_leaks(example, docs[name], job.records)}/{n} | {job.wall_s:.1f} |")
        print(f"\nfield accuracy against examples/data/{SETS[name][1]} (sglite eval, with bench/accuracy.py's "
              "company, period and currency rules)\n")
        print_accuracy_table(scores)
        print_confidence_table(scores)
        for system, job in jobs[name].items():
            for doc_id, why in job.errors.items():
                print(f"{system} {doc_id} not valid: {why}")
    systems = list(jobs[sets[0]])
    if len(systems) > 1:
        ref = systems[0]
        print(f"\npaired against {ref}: gold fields only it got right : only the other got right (sign-test p)\n")
        print("| system | " + " | ".join(sets) + " | all sets |")
        print("|---|" + "---:|" * (len(sets) + 1))
        for system in systems[1:]:
            cells, tot = [], [0, 0]
            for name in sets:
                a, b = paired(evaluation(jobs[name][ref].records, gold[name]),
                              evaluation(jobs[name][system].records, gold[name]))["total"]
                tot[0], tot[1] = tot[0] + a, tot[1] + b
                cells.append(f"{a} : {b} (p {sign_test_p(a, b):.2f})")
            cells.append(f"{tot[0]} : {tot[1]} (p {sign_test_p(*tot):.2f})")
            print(f"| {system} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
