"""Microbenchmarks of sglite's Triton kernels beside their torch peers, from the same run. Prints a table.

    python bench/kernels.py [--json FILE] [--e2e] [--engine] [--tune]     # on a CUDA GPU
    python bench/kernels.py --cpu-smoke [--e2e]    # tiny shapes under TRITON_INTERPRET=1: the script works

Rows: device copy bandwidth (the ceiling), paged decode attention at batch 1/32/128 x context 1k/8k (achieved
bandwidth and % of copy), extend attention (TFLOP/s), KV store and token-mask application; with --e2e, greedy
decoding with the Triton vs torch backends (tokens must match); with --engine, Engine decode throughput.
Timings on CUDA are medians from triton.testing.do_bench (L2 flushed between runs); on the CPU, one run.
"""
import argparse
import json
import os
import sys
import time

# decode / extend shapes: Llama-3-8B's attention (32 query heads, 8 KV heads, head_dim 128), bf16
GPU_SHAPE = dict(Hq=32, Hkv=8, D=128, dtype="bfloat16")
CPU_SHAPE = dict(Hq=4, Hkv=2, D=16, dtype="float32")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes under the Triton interpreter")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--e2e", action="store_true", help="greedy decoding, triton vs torch backend")
    ap.add_argument("--engine", action="store_true", help="Engine decode throughput (needs the real model)")
    ap.add_argument("--tune", action="store_true", help="sweep kernel block sizes at the headline shapes")
    args = ap.parse_args()
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"   # before any kernel is built (they are built on first use)
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("no CUDA GPU: run with --cpu-smoke to check the script under the interpreter")
        return 2
    b = Bench(torch, "cpu" if args.cpu_smoke else "cuda", args.json)
    b.header()
    copy_gbs = b.copy_bandwidth()
    b.decode(copy_gbs)
    b.extend()
    b.kv_store(copy_gbs)
    b.token_mask()
    if args.e2e:
        b.e2e()
    if args.engine:
        b.engine()
    if args.tune:  # last: the slowest part (one compile per config), and the least needed
        b.tune(copy_gbs)
    if args.json:
        print(f"\nwrote {len(b.rows)} rows to {args.json}")
    for failure in b.failures:
        print("FAILED:", failure)
    return 1 if b.failures else 0


class Bench:
    def __init__(self, torch, device: str, json_path: str | None = None):
        self.torch = torch
        self.json_path = json_path  # rewritten after every row, so a timeout still leaves the results
        self.device = device
        self.smoke = device == "cpu"
        shape = CPU_SHAPE if self.smoke else GPU_SHAPE
        self.Hq, self.Hkv, self.D = shape["Hq"], shape["Hkv"], shape["D"]
        self.dtype = getattr(torch, shape["dtype"])
        self.rows: list[dict] = []
        self.failures: list[str] = []

    # ---- plumbing ---------------------------------------------------------------------------------------
    def header(self) -> None:
        import triton
        torch = self.torch
        name = torch.cuda.get_device_name() if not self.smoke else "CPU (TRITON_INTERPRET=1, smoke shapes)"
        print(f"device: {name} | torch {torch.__version__} | triton {triton.__version__} | python "
              f"{sys.version.split()[0]}")
        print(f"attention shape: Hq={self.Hq} Hkv={self.Hkv} D={self.D} {self.dtype}\n")
        print(f"{'bench':<14} {'case':<34} {'ours':>12} {'peer':>12}  metric")
        print("-" * 100)

    def ms(self, fn) -> float:
        """Median milliseconds of fn()."""
        if self.smoke:
            fn()
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        import triton.testing
        return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")

    def row(self, bench: str, case: str, ours_ms: float | None, peer_ms: float | None, metric: str,
            **extra) -> None:
        fmt = lambda v: "-" if v is None else f"{v * 1e3:.1f} us" if v < 1 else f"{v:.3f} ms"  # noqa: E731
        print(f"{bench:<14} {case:<34} {fmt(ours_ms):>12} {fmt(peer_ms):>12}  {metric}", flush=True)
        self.rows.append(dict(bench=bench, case=case, ours_ms=ours_ms, peer_ms=peer_ms, metric=metric, **extra))
        if self.json_path:
            with open(self.json_path, "w") as f:
                json.dump(self.rows, f, indent=1)

    def paged(self, seq_lens: list[int], Hkv: int, D: int, extra_slots: int = 0):
        """A pool with every request's tokens on randomly permuted slots (worst-case scatter)."""
        torch = self.torch
        total = sum(seq_lens) + extra_slots
        g = torch.Generator(device="cpu").manual_seed(0)
        k = torch.randn(total + 1, Hkv, D, device=self.device, dtype=self.dtype)
        v = torch.randn(total + 1, Hkv, D, device=self.device, dtype=self.dtype)
        perm = (torch.randperm(total, generator=g) + 1).to(torch.int32)
        table = torch.zeros(len(seq_lens), max(seq_lens), dtype=torch.int32)
        start = 0
        for i, n in enumerate(seq_lens):
            table[i, :n] = perm[start:start + n]
            start += n
        rows = torch.arange(len(seq_lens))
        return k, v, table.to(self.device), rows.to(self.device), perm[start:], torch.tensor(seq_lens).to(self.device)

    # ---- benches ----------------------------------------------------------------------------------------
    def copy_bandwidth(self) -> float:
        torch = self.torch
        n = (16 << 20) if self.smoke else (1 << 30)
        src = torch.empty(n, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        t = self.ms(lambda: dst.copy_(src))
        gbs = 2 * n / t / 1e6
        self.row("copy", f"{n >> 20} MiB device-to-device", t, None, f"{gbs:.0f} GB/s (read+write) = 100%",
                 gbs=gbs)
        return gbs

    def decode(self, copy_gbs: float, cases=None) -> None:
        from sglite.kernels.decode_attention import decode_attention_triton
        torch = self.torch
        F = torch.nn.functional
        cases = cases or ([(1, 64), (2, 128)] if self.smoke else
                          [(b, n) for b in (1, 32, 128) for n in (1024, 8192)])
        Hq, Hkv, D = self.Hq, self.Hkv, self.D
        for B, n in cases:
            k, v, table, rows, _, seq = self.paged([n] * B, Hkv, D)
            q = torch.randn(B, Hq, D, device=self.device, dtype=self.dtype)
            scale = D ** -0.5
            ours = self.ms(lambda: decode_attention_triton(q, k, v, table, rows, seq, scale))
            slots = table[rows, :n].long()

            def peer():  # the torch backend's way: gather the pages, one SDPA
                keys, values = k[slots].transpose(1, 2), v[slots].transpose(1, 2)        # [B, Hkv, n, D]
                return F.scaled_dot_product_attention(q[:, :, None], keys, values, scale=scale, enable_gqa=True)

            peer_ms = self.ms(peer) if B * n * Hkv * D * k.element_size() * 2 < (8 << 30) else None
            nbytes = 2 * B * n * Hkv * D * k.element_size() + 4 * B * n
            gbs = nbytes / ours / 1e6
            self.row("decode", f"batch {B:>3} x ctx {n:>5}", ours, peer_ms,
                     f"{gbs:.0f} GB/s = {100 * gbs / copy_gbs:.0f}% of copy", gbs=gbs, pct_copy=100 * gbs / copy_gbs,
                     batch=B, context=n)
            del k, v

    def extend(self, cases=None, **knobs) -> None:
        from sglite.kernels.extend_attention import extend_attention_triton
        torch = self.torch
        F = torch.nn.functional
        cases = cases or ([(1, 0, 32), (2, 16, 20)] if self.smoke else
                          [(1, 0, 4096), (4, 0, 2048), (8, 3584, 512), (32, 1024, 128)])
        Hq, Hkv, D = self.Hq, self.Hkv, self.D
        for B, prefix, ext in cases:
            k_cache, v_cache, table, rows, _, _ = self.paged([max(prefix, 1)] * B, Hkv, D)
            T = B * ext
            q = torch.randn(T, Hq, D, device=self.device, dtype=self.dtype)
            kn = torch.randn(T, Hkv, D, device=self.device, dtype=self.dtype)
            vn = torch.randn(T, Hkv, D, device=self.device, dtype=self.dtype)
            pl = torch.full((B,), prefix, device=self.device)
            el = torch.full((B,), ext, device=self.device)
            ours = self.ms(lambda: extend_attention_triton(q, kn, vn, k_cache, v_cache, table, rows, pl, el,
                                                           D ** -0.5, max_extend=ext, **knobs))
            # peer: torch SDPA over K/V gathered beforehand (not timed), GQA expanded, causal mask at the prefix
            slots = table[rows, :prefix].long()
            keys = torch.cat([k_cache[slots], kn.view(B, ext, Hkv, D)], 1).repeat_interleave(Hq // Hkv, 2)
            values = torch.cat([v_cache[slots], vn.view(B, ext, Hkv, D)], 1).repeat_interleave(Hq // Hkv, 2)
            qb, keys, values = (x.transpose(1, 2) for x in (q.view(B, ext, Hq, D), keys, values))
            mask = None if prefix == 0 else (torch.arange(prefix + ext, device=self.device)[None, :]
                                             <= prefix + torch.arange(ext, device=self.device)[:, None])
            peer = self.ms(lambda: F.scaled_dot_product_attention(qb, keys, values, attn_mask=mask,
                                                                  is_causal=mask is None, scale=D ** -0.5))
            flops = 4 * D * Hq * B * (ext * prefix + ext * (ext + 1) / 2)
            tag = " m{block_m} n{block_n} w{num_warps} s{num_stages}".format(**knobs) if knobs else ""
            self.row("extend", f"b{B} prefix {prefix} new {ext}{tag}", ours, peer,
                     f"{flops / ours / 1e9:.1f} TFLOP/s (peer {flops / peer / 1e9:.1f})",
                     tflops=flops / ours / 1e9, peer_tflops=flops / peer / 1e9)

    def kv_store(self, copy_gbs: float) -> None:
        from sglite.kernels.kv_store import store_kv_cache_torch, store_kv_cache_triton
        torch = self.torch
        T = 16 if self.smoke else 8192
        k_cache, v_cache, _, _, free, _ = self.paged([1], self.Hkv, self.D, extra_slots=4 * T)
        loc = free[:T].long().to(self.device)
        k = torch.randn(T, self.Hkv, self.D, device=self.device, dtype=self.dtype)
        v = torch.randn_like(k)
        ours = self.ms(lambda: store_kv_cache_triton(k_cache, v_cache, loc, k, v))
        peer = self.ms(lambda: store_kv_cache_torch(k_cache, v_cache, loc, k, v))
        gbs = 4 * k.numel() * k.element_size() / ours / 1e6
        self.row("kv_store", f"{T} tokens, scattered slots", ours, peer, f"{gbs:.0f} GB/s = "
                 f"{100 * gbs / copy_gbs:.0f}% of copy", gbs=gbs)

    def token_mask(self) -> None:
        from sglite.kernels.token_mask import apply_token_bitmask_torch, apply_token_bitmask_triton
        torch = self.torch
        V = 1000 if self.smoke else 128256
        for B in ((1, 4) if self.smoke else (1, 64, 256)):
            logits = torch.randn(B, V, device=self.device)
            mask = torch.randint(-2**31, 2**31 - 1, (B, (V + 31) // 32), dtype=torch.int32, device=self.device)
            ours = self.ms(lambda: apply_token_bitmask_triton(logits, mask))
            peer = self.ms(lambda: apply_token_bitmask_torch(logits, mask))
            self.row("token_mask", f"batch {B:>3} x vocab {V}", ours, peer, "fp32 logits, ~50% allowed")

    def tune(self, copy_gbs: float) -> None:
        """A small sweep at the headline shapes, to pick defaults from numbers rather than guesses."""
        from sglite.kernels.decode_attention import decode_attention_triton
        torch = self.torch
        B, n = (2, 128) if self.smoke else (128, 8192)
        k, v, table, rows, _, seq = self.paged([n] * B, self.Hkv, self.D)
        q = torch.randn(B, self.Hq, self.D, device=self.device, dtype=self.dtype)
        nbytes = 2 * B * n * self.Hkv * self.D * k.element_size() + 4 * B * n
        for splits in (1, 2, 4):
            for block_n, warps, stages in ((32, 4, 2), (64, 4, 2), (64, 4, 3), (128, 4, 2), (64, 8, 2), (128, 8, 3)):
                try:
                    t = self.ms(lambda: decode_attention_triton(q, k, v, table, rows, seq, 0.1, num_splits=splits,
                                                                block_n=block_n, num_warps=warps, num_stages=stages))
                except Exception as e:  # e.g. out of shared memory for a large config
                    print(f"tune decode splits={splits} block_n={block_n} warps={warps} stages={stages}: "
                          f"{type(e).__name__}: {str(e)[:80]}")
                    continue
                gbs = nbytes / t / 1e6
                self.row("tune-decode", f"{B}x{n} s={splits} n={block_n} w={warps} st={stages}", t, None,
                         f"{gbs:.0f} GB/s = {100 * gbs / copy_gbs:.0f}% of copy", gbs=gbs)
        del k, v
        case = [(1, 0, 32)] if self.smoke else [(4, 0, 2048)]
        for bm, bn, warps, stages in ((64, 64, 4, 2), (128, 64, 8, 2), (128, 32, 4, 2), (128, 64, 4, 3)):
            try:
                self.extend(case, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
            except Exception as e:
                print(f"tune extend {bm}/{bn}/{warps}/{stages}: {type(e).__name__}: {str(e)[:80]}")

    def e2e(self) -> None:
        """Greedy decoding through ForwardBatch on a paged pool (scattered slots), Triton vs torch backend.
        Uses the real model when it can be loaded, else random weights of SmolLM2-135M's shape."""
        torch = self.torch
        from sglite.runtime.model import LlamaModel
        from sglite.runtime.testing import random_weights, tiny_config

        if self.smoke:
            cfg = tiny_config(vocab_size=512)
            nets = {"float32": LlamaModel(cfg, random_weights(cfg, seed=0))}
            what, prompt_len, steps, batch = "tiny random model", 12, 3, 2
        else:
            nets, what = self._real_or_shaped_nets()
            prompt_len, steps, batch = 100, 32, 4
        for dtype_name, net in nets.items():
            g = torch.Generator().manual_seed(1)
            prompts = [torch.randint(0, net.config.vocab_size, (prompt_len + 7 * i,), generator=g).tolist()
                       for i in range(batch)]
            t = {}
            outs = {}
            for backend in ("torch", "triton"):
                start = time.perf_counter()
                outs[backend] = _greedy(net, backend, prompts, steps)
                t[backend] = (time.perf_counter() - start) * 1e3
            same = outs["triton"] == outs["torch"]
            first_diff = next((i for i in range(steps) if [o[i] for o in outs["triton"]] !=
                               [o[i] for o in outs["torch"]]), None)
            verdict = "greedy EQUAL" if same else f"greedy DIFFER from step {first_diff}"
            self.row("e2e", f"{what} {dtype_name} {batch}x{steps} tok", t["triton"], t["torch"], verdict,
                     equal=same)
            if not same and dtype_name == "float32":
                self.failures.append(f"e2e {what} {dtype_name}: {verdict}")

    def _real_or_shaped_nets(self):
        torch = self.torch
        from sglite.runtime.config import ModelConfig
        from sglite.runtime.model import LlamaModel
        from sglite.runtime.testing import random_weights
        try:
            from sglite.runtime.model import load_model
            return ({name: load_model(device="cuda", dtype=getattr(torch, name)).net
                     for name in ("float32", "bfloat16")}, "SmolLM2-135M")
        except Exception as e:  # no model package / gguf on this machine
            print(f"(real model not loadable here: {type(e).__name__}: {str(e)[:120]}; "
                  f"using random weights of SmolLM2-135M's shape)")
        cfg = ModelConfig(architecture="llama", num_layers=30, hidden_size=576, intermediate_size=1536,
                          num_heads=9, num_kv_heads=3, vocab_size=49152, head_dim=64, rope_theta=100000.0,
                          rms_norm_eps=1e-5, max_context=8192)
        weights = random_weights(cfg, seed=0)
        return ({name: LlamaModel(cfg, weights, device="cuda", dtype=getattr(torch, name))
                 for name in ("float32", "bfloat16")}, "random SmolLM2-135M-shaped")

    def engine(self) -> None:
        try:
            from sglite.runtime.engine import Engine
        except Exception as e:
            print(f"engine: not importable ({type(e).__name__}: {e})")
            return
        n_req, n_prompt, n_new = (2, 8, 4) if self.smoke else (64, 64, 128)
        prompts = [[1 + (7 * i + j) % 1000 for j in range(n_prompt)] for i in range(n_req)]
        params = {"max_new_tokens": n_new, "temperature": 0, "ignore_eos": True}
        # under the interpreter the real model's 30 layers take minutes per token: torch only in the smoke run
        for backend in ("torch",) if self.smoke else ("torch", "triton"):
            try:
                eng = Engine(device=self.device, attention_backend=backend)
                eng.generate(input_ids=prompts[:2], sampling_params=dict(params, max_new_tokens=4))  # warm-up
                start = time.perf_counter()
                out = eng.generate(input_ids=prompts, sampling_params=params)
                secs = time.perf_counter() - start
                eng.shutdown()
            except Exception as e:
                print(f"engine ({backend}): skipped, {type(e).__name__}: {str(e)[:160]}")
                continue
            toks = sum(o["meta_info"]["completion_tokens"] for o in out)
            self.row("engine", f"{backend}: {n_req} reqs x {n_new} new", secs * 1e3, None,
                     f"{toks / secs:.0f} output tok/s")


def _greedy(net, backend: str, prompts: list[list[int]], steps: int) -> list[list[int]]:
    """Prefill all prompts in one batch, then `steps` batched greedy decode steps; slots handed out backwards
    and interleaved so no request's KV is contiguous. Returns the generated ids per request."""
    import torch
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool

    c = net.config
    total = sum(map(len, prompts)) + len(prompts) * steps
    pool = KVPool(c.num_layers, total + 1, c.num_kv_heads, c.head_dim, net.dtype, net.device)
    attn = create_attention_backend(backend, pool, net.device)
    table = torch.zeros((len(prompts), max(map(len, prompts)) + steps), dtype=torch.int32, device=net.device)
    free = list(range(total, 0, -1))
    rows = list(range(len(prompts)))
    new, prefix, out = [list(p) for p in prompts], [0] * len(prompts), [[] for _ in prompts]
    for _ in range(steps):
        n = sum(map(len, new))
        loc, free = torch.tensor(free[:n]), free[n:]
        logits = net.forward(ForwardBatch.build(new, prefix, rows, loc, table), attn)
        nxt = logits.argmax(-1).tolist()
        for o, t in zip(out, nxt):
            o.append(t)
        prefix = [p + len(t) for p, t in zip(prefix, new)]
        new = [[t] for t in nxt]
    return out


if __name__ == "__main__":
    sys.exit(main())
