"""Engine benchmarks, ours beside the baseline from the same run (real SmolLM2-135M, float32, CPU).

    python bench/engine.py [--section shared_prefix|multi_turn|continuous|all] [--scale 0.25] [--no-transformers]

shared_prefix: N requests sharing a few-shot prefix, each with its own question, fixed output length: radix cache
    on vs off vs transformers generate (one left-padded batch) on the same token ids.
multi_turn:    conversations of several turns (each turn's prompt = the chat so far): TTFT per turn, cache on/off.
continuous:    requests with mixed output lengths: continuous batching vs static batches of the same size.
--scale shrinks request counts and lengths (1.0 = the full sizes: 32 requests, a 1,002-token prefix) so a run fits a shared 2-core CPU.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

WORDS = ("revenue cost margin growth region product customer quarter forecast risk supply demand price market "
         "team plan result report share board policy energy data model service contract").split()


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def token_prompts(tok, rng, n, prefix_tokens, question_tokens) -> list[list[int]]:
    shots = []
    while len(tok.encode("\n".join(shots))) < prefix_tokens:
        shots.append(f"Q: {text(rng, 12)}?\nA: {text(rng, 10)}.")
    prefix = tok.encode("Answer briefly.\n" + "\n".join(shots) + "\n")[:prefix_tokens]
    return [prefix + tok.encode(f"Q: {text(rng, question_tokens)}")[:question_tokens] + tok.encode("?\nA:")
            for _ in range(n)]


def summarize(outs: list[dict], wall: float, offsets: list[float] | None = None) -> dict:
    """offsets: per request, seconds between the run's start and its submission (added to TTFT)."""
    offsets = offsets or [0.0] * len(outs)
    ttft = [o["meta_info"]["ttft"] + off for o, off in zip(outs, offsets)]
    tpot = [(o["meta_info"]["e2e_latency"] - o["meta_info"]["ttft"]) / max(o["meta_info"]["completion_tokens"] - 1, 1)
            for o in outs]
    toks = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return {"wall": wall, "ttft": statistics.mean(ttft), "tpot": statistics.mean(tpot), "out_tok_s": toks / wall,
            "req_s": len(outs) / wall}


def engine(model, **kw):
    from sglite.runtime.engine import Engine
    return Engine(model, attention_backend="torch", **kw)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# --- shared prefix --------------------------------------------------------------------------------------------
def shared_prefix(model, args) -> None:
    n = max(2, round(32 * args.scale))
    prefix, question, out_len = round(1000 * args.scale), max(8, round(100 * args.scale)), 16
    prompts = token_prompts(model.tokenizer, random.Random(0), n, prefix, question)
    sp = {"temperature": 0, "max_new_tokens": out_len, "ignore_eos": True}
    prompt_tokens = sum(len(p) for p in prompts)
    shared = min(common_prefix(prompts[0], p) for p in prompts[1:])
    print(f"\n## Shared prefix: {n} requests, {shared}-token shared prefix, ~{question}-token questions, "
          f"{out_len} output tokens ({prompt_tokens} prompt tokens)\n")
    rows = []
    for name, kw in (("sglite, radix cache on", {}), ("sglite, radix cache off", {"disable_radix_cache": True})):
        e = engine(model, max_total_tokens=prompt_tokens + n * out_len + 64, **kw)
        e.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 2})  # warm-up
        e.flush_cache()
        t = time.perf_counter()
        outs = e.generate(input_ids=prompts, sampling_params=sp)
        wall = time.perf_counter() - t
        s = summarize(outs, wall)
        stats = e.get_stats()
        s["cached"] = sum(o["meta_info"]["cached_tokens"] for o in outs)
        s["hit"] = s["cached"] / prompt_tokens
        s["passes"] = stats["forward_passes"] - 2  # minus the warm-up
        outputs = [o["output_ids"] for o in outs]
        e.shutdown()
        rows.append((name, s))
    same = "yes" if outputs == [o["output_ids"] for o in outs] else "no"
    ideal = (n - 1) * shared
    if not args.no_transformers:
        rows.append(("transformers generate (one padded batch)", hf_generate(args, prompts, out_len)))
        rows.append(("transformers generate (one request at a time)", hf_generate(args, prompts, out_len, True)))
    on = rows[0][1]
    print("| system | wall s | forward passes | throughput out tok/s | mean TTFT s | mean TPOT s | cached tokens | "
          "cache hit rate | cache-on speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in rows:
        if "hit" in s:
            print(f"| {name} | {s['wall']:.1f} | {s['passes']} | {s['out_tok_s']:.1f} | {s['ttft']:.2f} | "
                  f"{s['tpot']:.3f} | {s['cached']} | {s['hit']:.1%} | {s['wall'] / on['wall']:.1f}x |")
        else:
            print(f"| {name} | {s['wall']:.1f} | - | {s['out_tok_s']:.1f} | - | - | - | - | "
                  f"{s['wall'] / on['wall']:.1f}x |")
    print(f"\ncached tokens: {on['cached']} of ideal {ideal} ((n-1) x shared prefix) = {on['cached'] / ideal:.1%}; "
          f"greedy outputs identical with cache on/off: {same}")


_hf = None


def hf_generate(args, prompts: list[list[int]], out_len: int, sequential: bool = False) -> dict:
    global _hf
    import transformers
    from sglite.runtime.model_source import default_model_path

    if _hf is None:
        path = default_model_path()
        _hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                                dtype=torch.float32).eval()
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[2] * (width - len(p)) + p for p in prompts])       # left padding
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        _hf.generate(ids[:1, -8:], max_new_tokens=2, do_sample=False, pad_token_id=2)  # warm-up
        t = time.perf_counter()
        if sequential:
            for p in prompts:
                _hf.generate(torch.tensor([p]), max_new_tokens=out_len, min_new_tokens=out_len, do_sample=False,
                             pad_token_id=2)
        else:
            _hf.generate(ids, attention_mask=mask, max_new_tokens=out_len, min_new_tokens=out_len, do_sample=False,
                         pad_token_id=2)
        wall = time.perf_counter() - t
    return {"wall": wall, "out_tok_s": len(prompts) * out_len / wall}


# --- multi-turn -----------------------------------------------------------------------------------------------
def multi_turn(model, args) -> None:
    convs, turns = max(2, round(8 * args.scale)), 4
    user_words, out_len = max(10, round(60 * args.scale)), 16
    tok = model.tokenizer
    print(f"\n## Multi-turn chat: {convs} conversations x {turns} turns, ~{user_words}-word user messages, "
          f"{out_len}-token replies; all conversations advance together\n")
    result = {}
    for name, kw in (("on", {}), ("off", {"disable_radix_cache": True})):
        rng = random.Random(1)
        e = engine(model, max_total_tokens=convs * turns * (user_words * 3 + out_len + 40) + 512, **kw)
        e.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 2})
        history = [[{"role": "system", "content": "You are a helpful analyst."}] for _ in range(convs)]
        per_turn = []
        for _ in range(turns):
            for h in history:
                h.append({"role": "user", "content": text(rng, user_words)})
            prompts = [tok.apply_chat_template(h) for h in history]
            outs = e.generate(prompts, {"temperature": 0, "max_new_tokens": out_len, "ignore_eos": True})
            for h, o in zip(history, outs):
                h.append({"role": "assistant", "content": o["text"]})
            per_turn.append((statistics.mean(o["meta_info"]["ttft"] for o in outs),
                             sum(o["meta_info"]["cached_tokens"] for o in outs) /
                             sum(o["meta_info"]["prompt_tokens"] for o in outs)))
        e.shutdown()
        result[name] = per_turn
    print("| turn | TTFT cache on s | TTFT cache off s | speed-up | cache hit rate (on) |")
    print("|---:|---:|---:|---:|---:|")
    for t in range(turns):
        (on, hit), (off, _) = result["on"][t], result["off"][t]
        print(f"| {t + 1} | {on:.2f} | {off:.2f} | {off / on:.1f}x | {hit:.1%} |")


# --- continuous vs static batching ----------------------------------------------------------------------------
def continuous(model, args) -> None:
    n, batch = max(4, round(32 * args.scale)), max(2, round(8 * args.scale))
    hi = max(16, round(256 * args.scale))
    rng = random.Random(2)
    lens = [rng.randint(4, hi) for _ in range(n)]
    prompts = [model.tokenizer.encode(text(rng, 30)) for _ in range(n)]
    sps = [{"temperature": 0, "max_new_tokens": m, "ignore_eos": True} for m in lens]
    print(f"\n## Continuous vs static batching: {n} requests, output lengths 4..{hi} (total {sum(lens)} tokens), "
          f"at most {batch} running at once\n")
    rows = []
    e = engine(model, max_running_requests=batch, max_total_tokens=n * (hi + 64))
    e.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 2})
    e.flush_cache()
    passes = e.get_stats()["forward_passes"]
    t = time.perf_counter()
    outs = e.generate(input_ids=prompts, sampling_params=sps)
    rows.append(("continuous batching (sglite)", summarize(outs, time.perf_counter() - t), outs))
    rows[-1][1]["passes"] = e.get_stats()["forward_passes"] - passes
    e.flush_cache()
    passes = e.get_stats()["forward_passes"]
    t = time.perf_counter()
    static, offsets = [], []
    for i in range(0, n, batch):  # a batch runs until its longest request is done, then the next starts
        offsets += [time.perf_counter() - t] * len(prompts[i:i + batch])
        static += e.generate(input_ids=prompts[i:i + batch], sampling_params=sps[i:i + batch])
    s = summarize(static, time.perf_counter() - t, offsets)
    s["passes"] = e.get_stats()["forward_passes"] - passes
    rows.append(("static batches (same engine)", s, static))
    e.shutdown()
    print("| mode | wall s | forward passes | throughput out tok/s | requests/s | mean TTFT s | mean TPOT s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s, _ in rows:
        print(f"| {name} | {s['wall']:.1f} | {s['passes']} | {s['out_tok_s']:.1f} | {s['req_s']:.2f} | "
              f"{s['ttft']:.2f} | {s['tpot']:.3f} |")
    print(f"\ncontinuous / static throughput: {rows[0][1]['out_tok_s'] / rows[1][1]['out_tok_s']:.2f}x; "
          f"same outputs: {'yes' if [o['output_ids'] for o in rows[0][2]] == [o['output_ids'] for o in static] else 'no'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--section", default="all", choices=["shared_prefix", "multi_turn", "continuous", "all"])
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from sglite.runtime.model import load_model

    model = load_model()
    print(f"torch threads: {torch.get_num_threads()}; scale {args.scale} of the full sizes; float32 CPU")
    for name, fn in (("shared_prefix", shared_prefix), ("multi_turn", multi_turn), ("continuous", continuous)):
        if args.section in (name, "all"):
            fn(model, args)


if __name__ == "__main__":
    main()
