"""Evaluation of an extraction output against gold values: `sglite eval OUTPUT [OTHER] --gold GOLD`.

Gold is JSONL, one object per document: its "id" and the right value of each field (null: the document does not
state it). Scored fields: the gold keys (but "id") that some output record has, or `fields`. Per field:
- accuracy: right values out of the documents whose gold value is not null (a document with no record, an error
  line or an id missing from the output, gets them all wrong);
- misses: the record gives null (or leaves the field out) where gold has a value;
- inventions: the record gives a value where gold is null.
Rules, chosen by the gold value's type unless a field's rule is given: numbers equal within a relative tolerance
(0.5%, or 0.005 absolute near zero; a bool is not a number), strings equal ignoring case and runs of whitespace,
lists equal as sets (their items by the same rules), anything else exactly. A rule is one of RULES or any
callable (value, gold) -> bool (on the command line, `module:function`).

Where the output lines carry field confidence ("confidence": {"/field": probability}, confidence.py), the values
scored are also counted by confidence bucket: how many fell in each and how many of those were right, so a
person can see which confidence is worth checking by hand.

Two outputs are compared field by field over the gold values: how many only the first got right and how many
only the second did, with the two-sided exact sign test's p-value of that split (values both got right or both
wrong say nothing of the difference)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .confidence import BUCKET_NAMES, bucket
from .inputs import id_key

Rule = Callable[[Any, Any], bool]
REL_TOL, ABS_TOL = 0.005, 0.005


def number_rule(rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL) -> Rule:
    def same_number(value: Any, gold: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return abs(value - gold) <= max(rel_tol * abs(gold), abs_tol)
    return same_number


def same_text(value: Any, gold: Any) -> bool:
    return isinstance(value, str) and " ".join(value.casefold().split()) == " ".join(str(gold).casefold().split())


def same_exact(value: Any, gold: Any) -> bool:
    return type(value) is type(gold) and value == gold


def same_set(value: Any, gold: Any) -> bool:
    if not isinstance(value, list):
        return False
    rule = lambda v, g: default_rule(g)(v, g)   # noqa: E731 - items by the rule of their gold type
    return all(any(rule(v, g) for v in value) for g in gold) and all(any(rule(v, g) for g in gold) for v in value)


RULES: dict[str, Rule] = {"number": number_rule(), "text": same_text, "exact": same_exact, "set": same_set}


def default_rule(gold: Any) -> Rule:
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        return RULES["number"]
    if isinstance(gold, str):
        return RULES["text"]
    if isinstance(gold, list):
        return RULES["set"]
    return RULES["exact"]


def parse_rule(spec: str) -> Rule:
    """'number', 'number:REL' (relative tolerance, 0.01 = 1%), 'text', 'exact', 'set' or 'module:function'."""
    name, _, arg = spec.partition(":")
    if name in RULES and not arg:
        return RULES[name]
    if name == "number":
        try:
            return number_rule(float(arg), 0.0)
        except ValueError:
            raise ValueError(f"rule {spec!r}: number:REL takes a relative tolerance such as 0.01") from None
    if arg:
        import importlib
        try:
            fn = getattr(importlib.import_module(name), arg)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"rule {spec!r}: cannot import it ({type(e).__name__}: {e})") from None
        if callable(fn):
            return fn
    raise ValueError(f"rule {spec!r}: give one of {sorted(RULES)}, number:REL, or module:function")


@dataclass
class FieldScore:
    right: int = 0
    scored: int = 0       # documents whose gold value is not null
    misses: int = 0       # null or absent in the record where gold has a value
    inventions: int = 0   # a value in the record where gold is null

    @property
    def accuracy(self) -> float | None:
        return self.right / self.scored if self.scored else None


@dataclass
class Evaluation:
    fields: dict[str, FieldScore]
    total: FieldScore
    documents: int                                           # gold documents scored
    no_record: int                                           # of which with no record (error line or missing)
    not_in_gold: list[Any] = field(default_factory=list)     # output ids without gold values (not scored)
    right: dict[tuple[str, str], bool] = field(default_factory=dict)   # (id key, field) -> right, for pairing
    confidence: dict[tuple[str, str], float] = field(default_factory=dict)   # (id key, field) -> its confidence

    def by_confidence(self) -> dict[str, tuple[int, int]]:
        """{bucket: (values right, values scored)} over the scored values that have a confidence, every bucket
        of confidence.BUCKET_NAMES present (low first)."""
        out = {name: [0, 0] for name in BUCKET_NAMES}
        for where, p in self.confidence.items():
            if where in self.right:
                cell = out[bucket(p)]
                cell[0] += self.right[where]
                cell[1] += 1
        return {name: (r, n) for name, (r, n) in out.items()}

    def confidence_table(self) -> str:
        """The by_confidence counts as rows; empty when no scored value has a confidence."""
        counts = self.by_confidence()
        if not any(n for _, n in counts.values()):
            return ""
        rows = [f"{'confidence':<10}  {'values':>6}  {'right':>16}"]
        for name, (r, n) in counts.items():
            rows.append(f"{name:<10}  {n:>6}  {f'{r}/{n} ({r / n:.0%})' if n else '-':>16}")
        return "\n".join(rows)

    def table(self) -> str:
        width = max(len("field"), *(len(f) for f in self.fields)) if self.fields else len("field")
        rows = [f"{'field':<{width}}  {'accuracy':>16}  {'misses':>8}  {'inventions':>10}"]
        for name, s in [*self.fields.items(), ("total", self.total)]:
            acc = f"{s.right}/{s.scored} ({s.accuracy:.0%})" if s.scored else "-"
            rows.append(f"{name:<{width}}  {acc:>16}  {s.misses:>8}  {s.inventions:>10}")
        return "\n".join(rows)


def load_lines(path: Path) -> dict[str, dict[str, Any]]:
    """JSONL objects with an "id", by id key; ValueError naming the line that is not one."""
    out: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
            if not isinstance(obj, dict) or "id" not in obj:
                raise ValueError(f"{path}:{n}: not an object with an \"id\"")
            out[id_key(obj["id"])] = obj
    return out


def scored_fields(output: dict[str, dict], gold: dict[str, dict]) -> list[str]:
    """Gold keys (but "id") that some output record has, in the gold file's order."""
    have = {k for line in output.values() if isinstance(line.get("record"), dict) for k in line["record"]}
    names = dict.fromkeys(k for g in gold.values() for k in g if k != "id")
    return [k for k in names if k in have]


def evaluate(output: dict[str, dict], gold: dict[str, dict], fields: list[str] | None = None,
             rules: dict[str, Rule] | None = None) -> Evaluation:
    """Scores output lines ({id key: line}) against gold ({id key: gold object}); see the module docstring."""
    fields = scored_fields(output, gold) if fields is None else fields
    rules = rules or {}
    scores = {name: FieldScore() for name in fields}
    total = FieldScore()
    result = Evaluation(scores, total, 0, 0, [output[k]["id"] for k in output if k not in gold])
    for key, g in gold.items():
        line = output.get(key)
        record = line.get("record") if line is not None else None
        result.documents += 1
        result.no_record += not isinstance(record, dict)
        record = record if isinstance(record, dict) else None
        scores_of = line.get("confidence") if record is not None and isinstance(line.get("confidence"), dict) else {}
        for name in fields:
            s, want = scores[name], g.get(name)
            value = record.get(name) if record is not None else None
            if want is None:
                if value is not None:
                    s.inventions += 1
                    total.inventions += 1
                continue
            ok = record is not None and value is not None and bool((rules.get(name) or default_rule(want))(value, want))
            result.right[(key, name)] = ok
            p = scores_of.get("/" + name.replace("~", "~0").replace("/", "~1"))
            if isinstance(p, (int, float)) and not isinstance(p, bool):
                result.confidence[(key, name)] = float(p)
            s.scored += 1
            s.right += ok
            total.scored += 1
            total.right += ok
            if record is not None and value is None:
                s.misses += 1
                total.misses += 1
    return result


def sign_test_p(a: int, b: int) -> float:
    """Two-sided exact sign-test p-value of a split a:b of discordant values (binomial, p = 1/2)."""
    n = a + b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a, b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(a: Evaluation, b: Evaluation) -> dict[str, tuple[int, int]]:
    """Per field and "total": (values only `a` got right, values only `b` got right)."""
    out = {name: [0, 0] for name in (*a.fields, "total")}
    for where, ok in a.right.items():
        other = b.right.get(where, False)
        for name in (where[1], "total"):
            out[name][0] += ok and not other
            out[name][1] += other and not ok
    return {name: (x, y) for name, (x, y) in out.items()}


def paired_table(a: Evaluation, b: Evaluation, names: tuple[str, str]) -> str:
    pairs = paired(a, b)
    width = max(len("field"), *(len(f) for f in pairs))
    rows = [f"{'field':<{width}}  {names[0][:16]:>16}  {names[1][:16]:>16}  {'only A : only B':>16}  "
            f"{'sign-test p':>11}"]
    for name, (x, y) in pairs.items():
        sa, sb = (e.fields.get(name, e.total) if name != "total" else e.total for e in (a, b))
        acc = [f"{s.right}/{s.scored}" for s in (sa, sb)]
        rows.append(f"{name:<{width}}  {acc[0]:>16}  {acc[1]:>16}  {f'{x} : {y}':>16}  {sign_test_p(x, y):>11.3f}")
    return "\n".join(rows)
