"""JSON Schema Test Suite (draft 2020-12) as an oracle for the JSON-schema compiler, per keyword file.

For every schema the compiler accepts, each test instance is serialised with json.dumps, tokenized, and fed
token by token (each token must be in the mask); a valid instance must end with EOS allowed, an invalid one must
be rejected somewhere. Prints: keyword, cases, compiled, unsupported, correct, wrong.
`format.json` is annotation-only in 2020-12 (all strings valid); we assert formats, so it is replaced by
optional/format/<name>.json for the formats we support.

    python bench/jsonschema_suite.py [--keywords a,b] [--show-wrong]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT.parent / "shared" / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
FORMATS = ["date", "time", "date-time", "email", "uuid", "uri", "ipv4"]


def instance_accepted(tokenizer, grammar, instance, text: str | None = None) -> tuple[bool, str]:
    """Feed json.dumps(instance) token by token; (accepted, where it was rejected)."""
    text = json.dumps(instance) if text is None else text
    m = grammar.matcher()
    ids = tokenizer.encode(text)
    for k, t in enumerate(ids):
        mask = m.allowed_mask()
        ok = bool(mask[t])
        adv = m.accept_token(t)
        if ok != adv:
            raise AssertionError(f"mask and advance disagree on token {t} at {k} of {text!r}")
        if not ok:
            return False, f"token {k} {tokenizer.decode([t])!r}"
    if not m.is_accepting():
        return False, "EOS not allowed at end"
    if not m.allowed_mask()[tokenizer.eos_token_id]:
        raise AssertionError("is_accepting but EOS masked")
    return True, ""


def suite_files(keywords=None) -> list[tuple[str, Path]]:
    files = []
    for p in sorted(SUITE.glob("*.json")):
        if p.stem == "format":
            continue
        files.append((p.stem, p))
    for f in FORMATS:
        p = SUITE / "optional" / "format" / f"{f}.json"
        if p.exists():
            files.append((f"format:{f}", p))
    if keywords:
        files = [(k, p) for k, p in files if k in keywords]
    return files


def run_file(compiler, tokenizer, path: Path, show_wrong: bool = False) -> dict:
    from sglite.runtime.constrained import GrammarError, UnsupportedSchemaError
    stats = dict(cases=0, compiled=0, unsupported=0, errors=0, correct=0, wrong=0, wrong_cases=[])
    for case in json.loads(path.read_text()):
        stats["cases"] += 1
        try:
            g = compiler.compile_json_schema(case["schema"])
        except UnsupportedSchemaError:
            stats["unsupported"] += 1
            continue
        except GrammarError:
            stats["errors"] += 1
            continue
        stats["compiled"] += 1
        wrong = []
        for t in case["tests"]:
            got, where = instance_accepted(tokenizer, g, t["data"])
            if got != t["valid"]:
                wrong.append((t["description"], t["data"], t["valid"], where))
        if wrong:
            stats["wrong"] += 1
            stats["wrong_cases"].append((case["description"], wrong))
        else:
            stats["correct"] += 1
    return stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keywords", default="")
    ap.add_argument("--show-wrong", action="store_true")
    args = ap.parse_args()
    if not SUITE.exists():
        sys.exit(f"JSON Schema Test Suite not found at {SUITE}")
    sys.path.insert(0, str(ROOT.parent))
    from sglite.runtime.constrained import GrammarCompiler
    from sglite.runtime.tokenizer import load_tokenizer
    tok = load_tokenizer()
    compiler = GrammarCompiler(tok)
    kws = set(args.keywords.split(",")) if args.keywords else None
    counts = dict(cases=0, compiled=0, unsupported=0, errors=0, correct=0, wrong=0)
    groups = {"core": dict(counts), "format": dict(counts)}  # the suite proper (less format.json); optional/format
    print("| keyword | cases | compiled | unsupported | correct | wrong |")
    print("|---|---:|---:|---:|---:|---:|")
    t0 = time.time()
    for kw, path in suite_files(kws):
        st = run_file(compiler, tok, path)
        group = groups["format" if kw.startswith("format:") else "core"]
        for k in counts:
            group[k] += st[k]
        print(f"| {kw} | {st['cases']} | {st['compiled']} | {st['unsupported'] + st['errors']} | {st['correct']} "
              f"| {st['wrong']} |", flush=True)
        if args.show_wrong:
            for desc, w in st["wrong_cases"]:
                for d in w:
                    print(f"    WRONG {desc}: {d}")
    total = {k: groups["core"][k] + groups["format"][k] for k in counts}
    for label, g in (("**total**", total), ("draft2020-12 less format.json (the issue's count)", groups["core"]),
                     ("optional/format, in place of format.json (formats asserted)", groups["format"])):
        print(f"| {label} | {g['cases']} | {g['compiled']} | {g['unsupported'] + g['errors']} | {g['correct']} | "
              f"{g['wrong']} |")
    print(f"({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
