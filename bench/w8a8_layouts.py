"""The W8A8 kernel's compact weight layouts beside the wide one, on the same weights, interleaved in one run.

    python bench/w8a8_layouts.py [--shape 4096x640] [--threads 1,2] [--rows 1,128] [--reps 5]

For GGUF Q5_0, Q8_0 and Q6_K blocks (random integers in each type's range, float16 d where the type's d is
float16), each packed two ways: `wide` (8-bit integers, float32 d and m per block: 10 bits a weight per 32, 12 per
16) and the layout pack() chooses (Q5_0 5.5 bits, Q8_0 8.5, Q6_K 6.56: 6-bit integers, its int8 scales and
float16 d). Decode rows (M=1) cycle through copies of the weights larger than the caches, as a decode step reads
every layer once; prefill rows (M=128) reuse one copy.
Prints microseconds per matmul (the fastest of --reps rounds), the weights' GB/s at M=1, and the ratio. The two
layouts compute with the same weights; their outputs may differ in the last bit (another split of q into steps)."""
from __future__ import annotations

import argparse
import os
import time

import torch

from sglite.kernels import w8a8_cpu

TYPES = {"Q5_0": (32, 16, "f16"), "Q8_0": (32, 127, "f16"), "Q6_K": (16, 32, "q6k")}   # group, |q| bound, d


def wide(q: torch.Tensor, d: torch.Tensor, group: int) -> w8a8_cpu.W8A8Weights:
    """The 8-bit, float32 d-and-m layout of q + 128 (a stored minimum of -128 d)."""
    N, K = q.shape
    T, ng = N // 16, K // group
    qw = (q + 128).to(torch.uint8).view(T, 16, K // 4, 4).permute(0, 2, 1, 3).reshape(N, K).contiguous()

    def by_tile(v: torch.Tensor) -> torch.Tensor:
        return v.float().view(T, 16, ng).transpose(1, 2).reshape(N, ng).contiguous()

    return w8a8_cpu.W8A8Weights(qw, by_tile(d), by_tile(-128 * d), group)


def call(w: w8a8_cpu.W8A8Weights, x: torch.Tensor, y: torch.Tensor, threads: int) -> None:
    lib = w8a8_cpu.library()
    M, K = x.shape
    rc = lib.w8a8_gemm(w.qw.data_ptr(), w.wd.data_ptr(), w.wm.data_ptr(), x.data_ptr(), y.data_ptr(), M,
                       y.shape[1], K, w.group, w.bits, w.scales, int(w.sym), 2, threads)
    assert rc == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x640", help="NxK of one matrix (default: Gemma 3 270M's gate+up)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="1,128")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cycle-mb", type=int, default=256, help="bytes of weight copies M=1 cycles through")
    args = ap.parse_args()
    if w8a8_cpu.isa() is None:
        raise SystemExit(f"the W8A8 kernel is unavailable: {w8a8_cpu.unavailable_reason()}")
    N, K = (int(v) for v in args.shape.split("x"))
    print(f"W8A8 kernel ({w8a8_cpu.isa()}), [{N} x {K}], load average {os.getloadavg()[0]:.2f}")
    print("| type | layout | bits/weight | M | threads | wide µs | compact µs | wide GB/s | compact GB/s | speedup |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(0)
    for kind, (group, bound, half) in TYPES.items():
        copies = max(1, (args.cycle_mb << 20) // (N * K * 10 // 8))
        pairs = []
        for _ in range(copies):
            q = torch.randint(-bound, bound, (N, K), generator=g)
            d = torch.rand(N, K // group, generator=g) * 1e-3 + 1e-4
            if half == "f16":
                d = d.half().float()
            else:   # Q6_K's d: an int8 sc per 16 values times a float16 D per 256, each 16's largest |sc| -128
                sc = torch.randint(-128, 128, (N, K // 256, 16), generator=g).float()
                sc[..., 0] = -128
                d = (sc * (torch.rand(N, K // 256, 1, generator=g) * 1e-5 + 1e-6).half().float()).view(N, -1)
            pairs.append((wide(q, d, group), w8a8_cpu.pack(q + 128, d, -128 * d, group)))
        compact = pairs[0][1]
        for M in (int(v) for v in args.rows.split(",")):
            x = torch.randn(M, K, generator=g).bfloat16()
            y = torch.empty(M, N, dtype=torch.bfloat16)
            use = pairs if M == 1 else pairs[:1]
            for threads in (int(v) for v in args.threads.split(",")):
                best = [float("inf"), float("inf")]
                for _ in range(args.reps):   # interleaved: both layouts see the same machine
                    for j in (0, 1):
                        t = time.perf_counter()
                        for pair in use:
                            call(pair[j], x, y, threads)
                        best[j] = min(best[j], (time.perf_counter() - t) / len(use))
                gbs = [p.nbytes / t / 1e9 for p, t in zip(pairs[0], best)]
                print(f"| {kind} | {compact.layout} | {compact.nbytes * 8 / (N * K):.2f} | {M} | {threads} | "
                      f"{best[0] * 1e6:.1f} | {best[1] * 1e6:.1f} | {gbs[0]:.1f} | {gbs[1]:.1f} | "
                      f"{best[0] / best[1]:.2f}x |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
