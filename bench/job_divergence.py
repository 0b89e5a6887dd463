"""Why sglite's and llama.cpp's main-job records differ, report by report: the first token where the two outputs
part, and what decided it.

    python bench/job_divergence.py [--weights fp32] [--limit N] [--out /tmp/div.jsonl]

Both sides get the same prompt token ids (the chat messages rendered by sglite's tokenizer; the script checks that
llama-server's /apply-template and /tokenize give the same ids), greedy decoding, the example's JSON schema:
sglite through Engine.generate with the engine's defaults for a JSON-schema request, llama.cpp through
llama-server's /completion (`json_schema`, temperature 0, its defaults otherwise) asking for its 10 most likely
tokens at each step (llama-server reports them from the raw logits, before the grammar).

At the first token where they differ, the script teacher-forces each side's output through sglite's model (prompt
logprobs: the raw logits, no mask, no DRY) and walks sglite's grammar over the shared prefix, and classifies:
- "constraint": sglite's grammar does not allow llama.cpp's token there;
- "forced": sglite's token came from jump-forward (text the grammar forces, tokenized by sglite);
- "sampling": sglite's raw logits prefer llama.cpp's token, yet sglite took another (DRY, or another logits step);
- "logits": both tokens allowed and sglite's raw logits prefer its own token: the model's choice under sglite's
  logits, with the margin on each side (nats; llama.cpp's from its top-10, "> x" where its token is not listed).
The same is repeated with sglite's JSON DRY off (`dry_multiplier=0`), to separate DRY from the rest."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from accuracy import GOLD_FIELDS, load_gold, score  # noqa: E402
from vs_llamacpp import DEFAULT_BIN_DIR, LlamaServer, SgliteSide, chat_messages, find_binaries, load_example  # noqa: E402

TOP = 10


def llama_complete(server: LlamaServer, ids: list[int], schema: dict) -> tuple[list[int], list[dict]]:
    """llama-server's greedy output for prompt `ids`: its token ids, and per token its top-TOP (raw logits)."""
    r = server.client.post("/completion", json={
        "prompt": ids, "json_schema": schema, "temperature": 0, "n_predict": 512, "seed": 0,
        "n_probs": TOP, "return_tokens": True, "cache_prompt": True})
    r.raise_for_status()
    body = r.json()
    probs = body.get("completion_probabilities") or []
    return list(body["tokens"]), probs


def teacher_forced(engine, prompt: list[int], output: list[int]) -> list[tuple[dict[int, float], float]]:
    """sglite's raw log-probs at each output position: (top-TOP {token: logprob}, logprob of the output token)."""
    out = engine.generate(input_ids=prompt + output, sampling_params={"max_new_tokens": 1, "temperature": 0},
                          return_logprob=True, logprob_start_len=len(prompt), top_logprobs_num=TOP)
    meta = out["meta_info"]
    own = meta["input_token_logprobs"]     # entry i: (logprob, id, text) of input token logprob_start_len + i
    tops = meta["input_top_logprobs"]      # entry i: the distribution that scored it
    rows = []
    for k in range(len(output)):
        lp, tok = own[k][0], own[k][1]
        assert tok == output[k], (tok, output[k])
        rows.append(({t[1]: t[0] for t in tops[k]}, lp))
    return rows


def divergence(ours: list[int], theirs: list[int]) -> int | None:
    """First index where the two token lists differ (None: identical)."""
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return k
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def classify(engine, grammar, prompt: list[int], ours: list[int], theirs: list[int], their_probs: list[dict],
             k: int) -> dict[str, Any]:
    tok = engine.tokenizer
    m = grammar.matcher()
    for t in ours[:k]:
        assert m.accept_token(t)
    forced = m.forced_bytes()
    allowed = m.allowed_mask()
    a = ours[k] if k < len(ours) else None
    b = theirs[k] if k < len(theirs) else None
    ours_tf = teacher_forced(engine, prompt, ours[:k + 1]) if a is not None else None
    theirs_tf = teacher_forced(engine, prompt, theirs[:k + 1]) if b is not None else None
    lp_a = ours_tf[k][1] if ours_tf else None
    lp_b = theirs_tf[k][1] if theirs_tf else None
    top = (ours_tf or theirs_tf)[k][0]
    argmax = max(top, key=top.get)
    # llama.cpp's raw log-probs at k (its top-TOP; a token not listed is below the last one)
    ll = {}
    if k < len(their_probs):
        for c in their_probs[k].get("top_logprobs") or []:
            ll[c["id"]] = c["logprob"]
    ll_floor = min(ll.values()) if ll else None
    if b is not None and not allowed[b]:
        why = "constraint"
    elif a is not None and forced and tok.decode([a]).encode() and forced.startswith(
            bytes(engine.tokenizer.decode([a]), "utf-8")):
        why = "forced"
    elif lp_a is not None and lp_b is not None and lp_b > lp_a:
        why = "sampling"
    else:
        why = "logits"
    return {"k": k, "context": tok.decode(ours[:k])[-60:],
            "ours": tok.decode([a]) if a is not None else "<end>",
            "theirs": tok.decode([b]) if b is not None else "<end>",
            "why": why, "ours_allowed_theirs": bool(allowed[b]) if b is not None else None,
            "forced": forced.decode("utf-8", "replace"),
            "sg_lp_ours": lp_a, "sg_lp_theirs": lp_b, "sg_argmax": tok.decode([argmax]),
            "sg_margin": (lp_a - lp_b) if lp_a is not None and lp_b is not None else None,
            "ll_lp_theirs": ll.get(b), "ll_lp_ours": ll.get(a),
            "ll_margin": (ll[b] - ll[a]) if a in ll and b in ll else (
                f"> {ll[b] - ll_floor:.2f}" if b in ll and ll_floor is not None else None)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--weights", default=None)
    ap.add_argument("--llamacpp-bin", type=Path, default=DEFAULT_BIN_DIR)
    ap.add_argument("--out", type=Path, default=None, help="JSONL: per report both outputs and the divergence "
                    "(both sides' tokens are kept beside it, OUT.tokens.json, and reused by a rerun)")
    ap.add_argument("--dry-off", action="store_true", help="also run sglite with its JSON DRY off")
    args = ap.parse_args(argv)
    exes = find_binaries(args.llamacpp_bin)

    from sglite.runtime.model_source import resolve_model_path
    from sglite.protocol import SamplingParams

    gguf = resolve_model_path(args.model)
    example = load_example()
    docs = example.load_reports(ROOT / "examples" / "data" / "reports.jsonl", args.limit)
    gold = load_gold()
    schema = example.FinancialReport.model_json_schema()
    options = {"num_threads": args.threads, **({"weights": args.weights} if args.weights else {})}
    side = SgliteSide(gguf, options)
    engine = side.engine
    prompts = [engine.tokenizer.encode(side.render(chat_messages(example, d["text"]))) for d in docs]
    variants = {"default": {}, "dry off": {"dry_multiplier": 0.0}}
    if not args.dry_off:
        del variants["dry off"]
    cache = args.out.with_suffix(".tokens.json") if args.out else None
    saved = json.loads(cache.read_text()) if cache and cache.exists() else {}
    ours: dict[str, list[list[int]]] = saved.get("ours", {})
    for name, extra in variants.items():
        if name in ours:
            continue
        params = {"json_schema": json.dumps(schema), "temperature": 0, "max_new_tokens": 512, **extra}
        engine.flush_cache()
        ours[name] = [o["output_ids"] for o in engine.generate(input_ids=prompts, sampling_params=params)]
        saved["ours"] = ours
        if cache:
            cache.write_text(json.dumps(saved))
    grammar = engine.core.grammar.compile(SamplingParams.from_dict({"json_schema": json.dumps(schema)}))

    if "theirs" in saved:
        theirs, probs, same_ids = saved["theirs"], saved["probs"], saved["same_ids"]
    else:
        with LlamaServer(exes["llama-server"], gguf, args.threads, 2048) as server:
            theirs, probs, same_ids = [], [], 0
            for doc, ids in zip(docs, prompts):
                text = server.render(chat_messages(example, doc["text"]))
                r = server.client.post("/tokenize", json={"content": text, "add_special": True,
                                                          "parse_special": True})
                same_ids += r.json()["tokens"] == ids
                t, p = llama_complete(server, ids, schema)
                theirs.append(t)
                probs.append(p)
        saved.update(theirs=theirs, probs=probs, same_ids=same_ids)
        if cache:
            cache.write_text(json.dumps(saved))
    print(f"prompt ids: llama-server tokenizes its own rendering to sglite's ids for {same_ids}/{len(docs)} "
          "reports")

    rows = []
    for name in variants:
        counts: dict[str, int] = {}
        print(f"\n### sglite {name} vs llama.cpp\n")
        print("| id | k | context | sglite | llama.cpp | why | sglite margin | llama.cpp margin | fields right s/l |")
        print("|---|---:|---|---|---|---|---:|---:|---|")
        for doc, ids, a, b, p in zip(docs, prompts, ours[name], theirs, probs):
            k = divergence(a, b)
            rec_a, rec_b = (_parse(engine.tokenizer.decode(x, skip_special_tokens=True)) for x in (a, b))
            ra, rb = score(rec_a, gold[doc["id"]]), score(rec_b, gold[doc["id"]])
            right = f"{sum(ra.values())}/{sum(rb.values())}"
            if k is None:
                counts["same"] = counts.get("same", 0) + 1
                print(f"| {doc['id']} | – | identical | | | | | | {right} |")
                rows.append({"variant": name, "id": doc["id"], "same": True})
                continue
            c = classify(engine, grammar, ids, a, b, p, k)
            counts[c["why"]] = counts.get(c["why"], 0) + 1
            margin = f"{c['sg_margin']:.2f}" if c["sg_margin"] is not None else "–"
            llm = c["ll_margin"] if isinstance(c["ll_margin"], str) or c["ll_margin"] is None \
                else f"{c['ll_margin']:.2f}"
            print(f"| {doc['id']} | {k} | `{c['context'][-30:]!r}` | `{c['ours']!r}` | `{c['theirs']!r}` | "
                  f"{c['why']} | {margin} | {llm} | {right} |")
            rows.append({"variant": name, "id": doc["id"], "same": False, **c,
                         "ours_text": engine.tokenizer.decode(a), "theirs_text": engine.tokenizer.decode(b),
                         "right_ours": ra, "right_theirs": rb})
            sys.stdout.flush()
        print(f"\n{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        def records(outputs: list[list[int]]) -> dict[str, dict | None]:
            return {d["id"]: _parse(engine.tokenizer.decode(ids, skip_special_tokens=True))
                    for d, ids in zip(docs, outputs)}
        print_fields({f"sglite {name}": records(ours[name]), "llama.cpp": records(theirs)}, gold)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    side.shutdown()
    return 0


def print_fields(systems: dict[str, dict[str, dict | None]], gold: dict[str, dict]) -> None:
    """Gold fields right per field, one column per system."""
    scores = {name: [score(rec, gold[doc_id]) for doc_id, rec in recs.items()] for name, recs in systems.items()}
    print("\n| field | " + " | ".join(scores) + " |\n|---|" + "---:|" * len(scores))
    for field in (*GOLD_FIELDS, "total"):
        cells = []
        for rows in scores.values():
            right = [v for r in rows for f, v in r.items() if field in ("total", f)]
            cells.append(f"{sum(right)}/{len(right)}")
        print(f"| {field} | " + " | ".join(cells) + " |")


def _parse(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


if __name__ == "__main__":
    raise SystemExit(main())
