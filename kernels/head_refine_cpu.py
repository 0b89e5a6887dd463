"""The output head's refinement for the CPU (numba): from a row's approximate bfloat16 logits, its top-k
candidates get their float32 logits recomputed exactly (runtime/linear.py's RefinedHead).

    refine_head(approx, k, weight, x, out)   approx [T, V] bf16, weight [V, H] float32, x [T, H] float32 ->
                                             out [T, V] float32: approx widened, the k candidates' entries
                                             replaced by the dot products weight[v] . x[t]

`weight` may also be a GridMatrix (runtime/grid_matrix.py: the file's integer grid): a candidate's row is then
dequantized into a buffer as the GridMatrix computes it (no fused multiply-add) and dotted by the same loop, so
the logits equal those of its float32 matrix bit for bit.

One pass over the row and a selection among ~k * 64 of its values instead of torch's five ops (widen, topk,
gather, multiply, sum; on a 262,144-token row topk alone took ~0.9 ms). The candidates: every token above the
k-th largest value, then the lowest token ids among those equal to it, so ties resolve by id and a row's
candidates depend only on its own logits. `refine_head_ref` is the torch reference with the same choice.
"""
from __future__ import annotations

import numpy as np
import torch

try:
    import numba
except ImportError:   # optional: RefinedHead then refines with torch's ops
    numba = None


def available() -> bool:
    return numba is not None


if numba is not None:
    @numba.njit(inline="always")
    def _key(b):
        # bf16 bits (int16) -> an int32 in the values' order: negatives' magnitude bits flipped (-0 just below +0)
        s = np.int32(b)
        return s ^ ((s >> 15) & 0x7FFF)

    @numba.njit(fastmath=True, cache=True)
    def _dot(w, x):
        s = np.float32(0.0)
        for i in range(x.shape[0]):
            s += w[i] * x[i]
        return s

    @numba.njit(cache=True)
    def _grid_row(q, scale, lo, group, sym, buf):
        # one row of a GridMatrix in float32, as GridMatrix._values computes it (no fastmath: no contraction)
        for i in range(buf.shape[0]):
            g = i // group
            if sym:
                buf[i] = (np.float32(q[i]) - np.float32(128.0)) * scale[g]
            else:
                buf[i] = np.float32(q[i]) * scale[g] + lo[g]

    @numba.njit(cache=True, error_model="numpy")
    def _refine(approx, k, weight, gq, gscale, glo, group, sym, x, out):
        # approx [T, V] int16 (bf16 bits), weight [V, H] float32 (or [0, 0] with the grid gq [V, H] uint8, gscale,
        # glo [V, H / group] float32), x [T, H] float32, out [T, V] float32.
        # The k-th largest of the blocks' maxima bounds the row's k-th largest value from below (k blocks hold a
        # value at least that large), so only the blocks reaching it hold candidates: ~k values to select from
        # instead of V. The bound is taken from a histogram of the maxima's keys in steps of 64 (any lower bound
        # serves; the exact k-th value is found among the candidates).
        T, V = approx.shape
        B = 64
        nb = V // B                         # whole blocks; the tail's values are candidates whatever the bound
        ob = out.view(np.uint32)
        bmax = np.empty(nb, np.int32)
        hist = np.empty(1024, np.int32)
        cidx = np.empty(V, np.int64)
        ckey = np.empty(V, np.int32)
        grid = weight.shape[0] == 0
        buf = np.empty(x.shape[1], np.float32)
        for t in range(T):
            row = approx[t]
            for v in range(V):
                ob[t, v] = np.uint32(np.uint16(row[v])) << np.uint32(16)
            for j in range(nb):
                m = np.int32(-32768)
                for v in range(j * B, j * B + B):
                    m = max(m, _key(row[v]))
                bmax[j] = m
            hist[:] = 0
            for j in range(nb):
                hist[(bmax[j] + 32768) >> 6] += 1
            bound, seen = np.int32(-32768), 0
            if k <= nb:
                top = 1023
                while seen + hist[top] < k:
                    seen += hist[top]
                    top -= 1
                bound = np.int32((top << 6) - 32768)
            n = 0
            for j in range(nb + 1):
                if j == nb or bmax[j] >= bound:
                    for v in range(j * B, min(j * B + B, V)):
                        key = _key(row[v])
                        if key >= bound:
                            cidx[n] = v
                            ckey[n] = key
                            n += 1
            # among them (in id order): every key above the k-th largest, then the lowest ids equal to it
            kth = np.sort(ckey[:n])[n - k]
            need = k
            for i in range(n):
                if ckey[i] > kth:
                    need -= 1
            for i in range(n):
                key = ckey[i]
                if key > kth or (key == kth and need > 0):
                    if key == kth:
                        need -= 1
                    v = cidx[i]
                    if grid:
                        _grid_row(gq[v], gscale[v], glo[v], group, sym, buf)
                        out[t, v] = _dot(buf, x[t])
                    else:
                        out[t, v] = _dot(weight[v], x[t])


def refine_head(approx: torch.Tensor, k: int, weight: torch.Tensor, x: torch.Tensor, out: torch.Tensor
                ) -> torch.Tensor:
    """approx [T, V] bf16, weight [V, H] float32, x [T, H] float32 -> out [T, V] float32 (written, returned).
    All contiguous, on the CPU; 0 < k <= V."""
    T, V = approx.shape
    if not 0 < k <= V:
        raise ValueError(f"refine_head: k must be in 1..{V}, got {k}")
    if tuple(weight.shape) != (V, x.shape[1]) or out.shape != (T, V) or x.shape[0] != T:
        raise ValueError(f"refine_head: shapes disagree: approx {tuple(approx.shape)}, weight "
                         f"{tuple(weight.shape)}, x {tuple(x.shape)}, out {tuple(out.shape)}")
    if isinstance(weight, torch.Tensor):
        none = np.empty((0, 0), np.uint8), np.empty((0, 0), np.float32)
        args = (weight.numpy(), none[0], none[1], none[1], 1, False)
    else:      # a GridMatrix
        args = (np.empty((0, 0), np.float32), weight.q.numpy(), weight.scale.numpy(), weight.lo.numpy(),
                weight.group, weight.sym)
    _refine(approx.contiguous().view(torch.int16).numpy(), k, args[0], *args[1:], x.contiguous().numpy(),
            out.numpy())
    return out


def refine_head_ref(approx, k, weight, x, out):
    """The same candidates by torch's ops: values above the k-th largest, then ties by lowest id."""
    logits = approx.float()
    for t in range(logits.shape[0]):
        row = logits[t]
        kth = row.topk(k).values[-1]
        above = (row > kth).nonzero().squeeze(1)
        ties = (row == kth).nonzero().squeeze(1)[:k - len(above)]
        cand = torch.cat([above, ties])
        row[cand] = (weight[cand] * x[t]).sum(-1)      # a GridMatrix's rows read the same way
    out.copy_(logits)
    return out
