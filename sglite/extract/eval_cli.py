"""`sglite eval OUTPUT [OTHER] --gold GOLD`: per-field accuracy, misses and inventions of an extraction output
(rules in evaluation.py), and by confidence bucket where the output carries field confidence; with OTHER, the two compared field by field with the paired sign test. Exit status: 0,
1 when the total accuracy is under --min-accuracy, 2 bad input (one line on stderr)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .evaluation import evaluate, load_lines, paired_table, parse_rule


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglite eval", description="score an sglite extract output against gold "
                                 "values, or two outputs against each other")
    ap.add_argument("outputs", nargs="+", type=Path, metavar="OUTPUT", help="one output, or two to compare")
    ap.add_argument("--gold", type=Path, required=True, help="JSONL: {\"id\", field: right value or null, ...}")
    ap.add_argument("--fields", default=None, help="comma list of fields to score (default: the gold keys that "
                                                   "the records have)")
    ap.add_argument("--rule", action="append", default=[], metavar="FIELD=RULE",
                    help="a field's rule: number, number:REL (relative tolerance), text, exact, set or "
                         "module:function (value, gold) -> bool; repeatable")
    ap.add_argument("--min-accuracy", type=float, default=None, metavar="FRACTION",
                    help="exit 1 when the (first) output's total accuracy is under this, such as 0.9")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if len(args.outputs) > 2:
            raise ValueError(f"give one output, or two to compare; got {len(args.outputs)}")
        if args.min_accuracy is not None and not 0 <= args.min_accuracy <= 1:
            raise ValueError(f"--min-accuracy is a fraction in [0, 1], got {args.min_accuracy}")
        rules = {}
        for spec in args.rule:
            name, eq, rule = spec.partition("=")
            if not eq or not name:
                raise ValueError(f"--rule {spec!r}: write FIELD=RULE")
            rules[name] = parse_rule(rule)
        gold = _load(args.gold, "--gold")
        outputs = [_load(p, "output") for p in args.outputs]
    except ValueError as e:
        print(f"sglite eval: {e}", file=sys.stderr)
        return 2
    fields = args.fields.split(",") if args.fields else None
    results = [evaluate(out, gold, fields, rules) for out in outputs]
    if fields is None and results[0].fields:
        fields = list(results[0].fields)
        results = [evaluate(out, gold, fields, rules) for out in outputs]   # both outputs on the same fields
    if not results[0].fields:
        print(f"sglite eval: no field of {args.gold} is in the records; name them with --fields", file=sys.stderr)
        return 2
    for path, result in zip(args.outputs, results):
        print(f"{path}: {result.documents} documents with gold values"
              + (f", {result.no_record} without a record" if result.no_record else "")
              + (f"; {len(result.not_in_gold)} output ids have no gold values (not scored)"
                 if result.not_in_gold else ""))
        print(result.table())
        by_confidence = result.confidence_table()
        if by_confidence:
            print(f"\nby the model's confidence in each value (the output's \"confidence\"):")
            print(by_confidence)
        print()
    if len(results) == 2:
        print(f"A = {args.outputs[0]}, B = {args.outputs[1]}: gold values only A got right : only B got right")
        print(paired_table(results[0], results[1], ("A right", "B right")))
    if args.min_accuracy is not None:
        acc = results[0].total.accuracy or 0.0
        if acc < args.min_accuracy:
            print(f"sglite eval: total accuracy {acc:.1%} is under --min-accuracy {args.min_accuracy:.1%}",
                  file=sys.stderr)
            return 1
    return 0


def _load(path: Path, what: str) -> dict:
    try:
        return load_lines(path)
    except OSError as e:
        raise ValueError(f"{what} {path}: cannot read ({e.strerror or e})") from None
