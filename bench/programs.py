"""Program workloads: sglite as designed vs. the same calls issued one at a time with the prefix cache off.

    python bench/programs.py                       # all workloads, real model, CPU unless CUDA is there
    python bench/programs.py --workloads select,fork --n 8

(a) sglite: run_batch (shared prefix prefilled once, programs concurrent so the engine batches them), fork
    prefills the shared prefix, select scores all choices in one batched request, radix cache on.
(b) naive: what a loop over an HTTP API does: one program after another, one call at a time, each select
    choice its own request, no prefix cache.
Both engines share one loaded model and run in this process; same programs, same inputs, greedy decoding."""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import sglite as sgl  # noqa: E402
from sglite.backend.base import Backend, Completion, Prompt  # noqa: E402
from sglite.lang.choices import ChoicesDecision  # noqa: E402

# --- workload 1: MMLU-style few-shot classification with select ------------------------------------------
SHOTS = [
    ("Which planet is known as the Red Planet?", ["Venus", "Mars", "Jupiter", "Saturn"], "B"),
    ("What is the chemical symbol for gold?", ["Au", "Ag", "Gd", "Go"], "A"),
    ("How many sides does a hexagon have?", ["Five", "Seven", "Eight", "Six"], "D"),
    ("Who wrote 'Romeo and Juliet'?", ["Charles Dickens", "Jane Austen", "William Shakespeare", "Mark Twain"], "C"),
    ("What gas do plants absorb from the atmosphere?", ["Carbon dioxide", "Oxygen", "Nitrogen", "Helium"], "A"),
]
QUESTIONS = [
    ("What is the largest ocean on Earth?", ["Atlantic", "Indian", "Arctic", "Pacific"]),
    ("What is the boiling point of water at sea level in Celsius?", ["90", "100", "110", "120"]),
    ("Which organ pumps blood through the body?", ["Liver", "Lung", "Heart", "Kidney"]),
    ("What is 7 times 8?", ["54", "56", "58", "64"]),
    ("Which language is primarily spoken in Brazil?", ["Spanish", "Portuguese", "French", "English"]),
    ("What is the capital of Japan?", ["Osaka", "Kyoto", "Tokyo", "Nagoya"]),
    ("Which metal is liquid at room temperature?", ["Mercury", "Iron", "Copper", "Zinc"]),
    ("How many continents are there?", ["Five", "Six", "Seven", "Eight"]),
    ("What is the square root of 81?", ["7", "8", "9", "10"]),
    ("Which animal is known as the King of the Jungle?", ["Tiger", "Lion", "Elephant", "Bear"]),
    ("What is the freezing point of water in Fahrenheit?", ["0", "32", "100", "212"]),
    ("Who painted the Mona Lisa?", ["Picasso", "Van Gogh", "Leonardo da Vinci", "Rembrandt"]),
    ("What is the hardest natural substance?", ["Gold", "Iron", "Diamond", "Quartz"]),
    ("Which planet is closest to the Sun?", ["Mercury", "Venus", "Earth", "Mars"]),
    ("What is the main language of Germany?", ["Dutch", "German", "Danish", "Polish"]),
    ("How many minutes are in an hour?", ["30", "45", "60", "100"]),
    ("What is H2O commonly called?", ["Salt", "Water", "Sugar", "Air"]),
    ("Which is the longest river in Africa?", ["Congo", "Niger", "Zambezi", "Nile"]),
    ("What is the currency of the United Kingdom?", ["Euro", "Dollar", "Pound sterling", "Yen"]),
    ("How many legs does a spider have?", ["Six", "Eight", "Ten", "Twelve"]),
]


def _fmt_q(q: str, options: list[str]) -> str:
    return q + "\n" + "".join(f"{l}. {o}\n" for l, o in zip("ABCD", options)) + "Answer:"


@sgl.function
def mmlu(s, question, options):
    s += "The following are multiple choice questions (with answers) about general knowledge.\n\n"
    for q, opts, ans in SHOTS:
        s += _fmt_q(q, opts) + f" {ans}\n\n"
    s += _fmt_q(question, options)
    s += sgl.select("answer", [" A", " B", " C", " D"])


# --- workload 2: tree-of-thought style fork --------------------------------------------------------------
TOT_INSTRUCTIONS = ("You are a careful problem solver. For each question, consider three different approaches, "
                    "write one short line of reasoning for each, then give a final one-line answer.\n\n")
TOT_QUESTIONS = ["How can a small bakery reduce food waste?", "Why is the sky blue?",
                 "How should a student prepare for a math exam?", "What makes a good team leader?",
                 "How can a city reduce traffic jams?", "Why do leaves change color in autumn?",
                 "How can I save money on groceries?", "What is the best way to learn a new language?"]


@sgl.function
def tree_of_thought(s, question):
    s += TOT_INSTRUCTIONS + f"Question: {question}\n"
    forks = s.fork(3)
    for i, f in enumerate(forks):
        f += f"Approach {i + 1}:" + sgl.gen("thought", max_tokens=24, stop="\n")
    forks.join()
    for i, t in enumerate(s["thought"]):
        s += f"Approach {i + 1}:{t}\n"
    s += "Final answer:" + sgl.gen("answer", max_tokens=24, stop="\n")


# --- the naive baseline ----------------------------------------------------------------------------------
class NaiveBackend(Backend):
    """One call at a time (a global lock), no prefix prefill, one request per select choice. Wrap a Runtime
    whose engine has the radix cache disabled."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.usage = inner.usage
        self._lock = threading.Lock()

    def chat_template(self):
        return self.inner.chat_template()

    def generate(self, prompt: Prompt, params) -> Completion:
        with self._lock:
            return self.inner.generate(prompt, params)

    def select(self, prompt, choices, temperature, method) -> ChoicesDecision:
        with self._lock:
            single = [self.inner.select(prompt, [c], temperature, sgl.token_length_normalized) for c in choices]
        metas = [d.meta_info for d in single]
        return method(choices=choices, normalized_prompt_logprobs=[m["normalized_prompt_logprobs"][0] for m in metas],
                      input_token_logprobs=[m["input_token_logprobs"][0] for m in metas],
                      output_token_logprobs=[[] for _ in choices])

    def commit_prefix(self, prompt: Prompt) -> None:
        pass


class _NoPrefillRuntime(sgl.Runtime):
    """The inner runtime of the naive baseline: select's prefix prefill is skipped too."""

    def commit_prefix(self, prompt):
        pass


def run_workload(name: str, program, batch: list[dict], ours, naive, check) -> dict:
    row = {"workload": name, "programs": len(batch)}
    for label, backend in (("sglite", ours), ("naive", naive)):
        backend.usage.reset()
        t0 = time.perf_counter()
        if label == "sglite":
            states = program.run_batch(batch, backend=backend, temperature=0)
        else:
            states = [program.run(backend=backend, temperature=0, **kw) for kw in batch]
        elapsed = time.perf_counter() - t0
        errors = [st.error() for st in states if st.error() is not None]
        row[f"{label}_s"] = elapsed
        row[f"{label}_prog_per_s"] = len(batch) / elapsed
        row[f"{label}_hit"] = backend.usage.cache_hit_rate
        row[f"{label}_errors"] = len(errors)
        row[f"{label}_ok"] = check(states) if not errors else 0
        if errors:
            row[f"{label}_first_error"] = f"{type(errors[0]).__name__}: {errors[0]}"[:160]
    row["speedup"] = row["sglite_prog_per_s"] / row["naive_prog_per_s"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="select,fork,extract")
    ap.add_argument("--n", type=int, default=None, help="programs per workload (default: all inputs)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    import torch

    from sglite.runtime.model import load_model
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(args.model, device=device)
    opts = dict(max_total_tokens=65536, device=device)
    ours = sgl.Runtime(engine=sgl.Engine(model, **opts))
    naive = NaiveBackend(_NoPrefillRuntime(engine=sgl.Engine(model, disable_radix_cache=True, **opts)))
    n = args.n
    rows = []
    for w in args.workloads.split(","):
        if w == "select":
            batch = [{"question": q, "options": o} for q, o in QUESTIONS[:n]]
            rows.append(run_workload("few-shot select (MMLU-style, 5-shot)", mmlu, batch, ours, naive,
                                     lambda sts: sum(st["answer"] in (" A", " B", " C", " D") for st in sts)))
        elif w == "fork":
            batch = [{"question": q} for q in TOT_QUESTIONS[:n]]
            rows.append(run_workload("tree-of-thought fork (3 branches)", tree_of_thought, batch, ours, naive,
                                     lambda sts: sum(len(st["thought"]) == 3 for st in sts)))
        elif w == "extract":
            import jsonschema
            from financial_report_extraction import FinancialReport, extract_report, load_reports
            docs = load_reports(ROOT / "examples" / "data" / "reports.jsonl", n)
            schema = FinancialReport.model_json_schema()

            def valid(sts):
                ok = 0
                for st in sts:
                    try:
                        jsonschema.validate(json.loads(st["record"]), schema)
                        ok += 1
                    except Exception:   # noqa: BLE001
                        pass
                return ok
            rows.append(run_workload("JSON extraction (20 reports)", extract_report,
                                     [{"report": d["text"]} for d in docs], ours, naive, valid))
        else:
            raise SystemExit(f"unknown workload {w!r}; use select, fork, extract")
        print(json.dumps(rows[-1]), file=sys.stderr)
    for b in (ours, naive):
        getattr(b, "inner", b).shutdown()

    print(f"\nsglite programs on {model.tokenizer.name} ({device})\n")
    head = f"{'workload':<40} {'n':>3} {'sglite prog/s':>13} {'naive prog/s':>12} {'speedup':>8} " \
           f"{'sglite hit':>10} {'naive hit':>9} {'ok (s/n)':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['workload']:<40} {r['programs']:>3} {r['sglite_prog_per_s']:>13.2f} {r['naive_prog_per_s']:>12.2f} "
              f"{r['speedup']:>7.1f}x {r['sglite_hit']:>10.1%} {r['naive_hit']:>9.1%} "
              f"{r['sglite_ok']:>4}/{r['naive_ok']:<4}")
        for label in ("sglite", "naive"):
            if r.get(f"{label}_first_error"):
                print(f"    {label}: {r[f'{label}_errors']} errors, first: {r[f'{label}_first_error']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
