"""LoraBatch: which rows of one forward pass run under which adapter, and the grouped low-rank product.

Rows of different adapters share the pass: every base projection runs once over all rows, then each adapter's
rows get `y += (x @ A.T) @ B.T` with that adapter's factors (S-LoRA / Punica's grouping, one pair of products per
adapter present). Rows of the base get nothing added.

Batch invariance: a row's delta must come out the same bits whatever rows share the pass. Both products run in
float32, each factor's matmul called as runtime/batch_invariance.py's per-shape probes allow. The rule depends on
the row's phase, which its request decides, never on the pass: prefill rows through row_independent (any call,
or calls padded to a minimum row count, ...); decode rows (a request's next token and its drafts, a handful per
adapter) in calls of exactly DECODE_TILE_ROWS rows where that is position-invariant (zero rows pad the call),
which costs a step with many adapters far less than padding each adapter's one row to the prefill minimum. The
delta is added to the row's output in float32 and rounded once to the output's dtype. (A retracted request's
generated tokens are recomputed as prefill rows: as with the weight plan's separate decode formats, those keys
may differ in the last bits from the first time.)
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from ..batch_invariance import PROBE_TOTAL, RowTiles, fixed_tile_rows, row_independent
from ..linear import DenseLinear
from .adapter import LoraAdapter


DECODE_TILE_ROWS = 4


def lora_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, decode: bool = False) -> torch.Tensor:
    """(x @ a.T) @ b.T in float32 for x [n, in] (any float dtype), a [R, in], b [out, R] -> [n, out], the calls
    made by the rule of the rows' phase (decode rows: `decode`)."""
    la, lb = DenseLinear(a), DenseLinear(b)
    n = x.shape[0]
    if decode:
        ta, tb = fixed_tile_rows(la, (DECODE_TILE_ROWS,)), fixed_tile_rows(lb, (DECODE_TILE_ROWS,))
        if ta and tb:   # pad once to whole tiles (zero rows stay zero through both)
            xp = x.float() if n % ta == 0 else F.pad(x.float(), (0, 0, 0, -n % ta))
            if xp.shape[0] == ta:
                return F.linear(F.linear(xp, a), b)[:n]
            return torch.cat([F.linear(F.linear(xp[i:i + ta], a), b) for i in range(0, xp.shape[0], ta)])[:n]
    la, lb = row_independent(la), row_independent(lb)
    if isinstance(la, RowTiles) or isinstance(lb, RowTiles) or n > PROBE_TOTAL:
        return lb(la(x.float()))
    # both take any call of their minimum rows or more: pad once (zero rows stay zero through both), slice once
    m = max(getattr(la, "min_rows", 1), getattr(lb, "min_rows", 1))
    xp = x.float() if n >= m else F.pad(x.float(), (0, 0, 0, m - n))
    return F.linear(F.linear(xp, a), b)[:n]


class LoraBatch:
    """groups: (adapter, rows, decode) per adapter and phase present, rows a slice (contiguous) or an index tensor
    into [T], decode whether they are decode rows."""

    def __init__(self, groups: list[tuple[LoraAdapter, slice | torch.Tensor, bool]]):
        self.groups = groups

    @staticmethod
    def build(adapters: Sequence[LoraAdapter | None], row_counts: Sequence[int],
              decode_from: int | None = None) -> "LoraBatch | None":
        """From each request's adapter (None: the base) and its row count, requests in row order; rows from
        `decode_from` on belong to decoding requests (None: none do). None when no request runs under an
        adapter."""
        rows: dict[tuple[int, bool], tuple[LoraAdapter, list[tuple[int, int]]]] = {}
        start = 0
        for adapter, n in zip(adapters, row_counts):
            if adapter is not None:
                decode = decode_from is not None and start >= decode_from
                segs = rows.setdefault((id(adapter), decode), (adapter, []))[1]
                if segs and segs[-1][1] == start:
                    segs[-1] = (segs[-1][0], start + n)
                else:
                    segs.append((start, start + n))
            start += n
        if not rows:
            return None
        groups = []
        for (_, decode), (adapter, segs) in rows.items():
            if len(segs) == 1:
                groups.append((adapter, slice(*segs[0]), decode))
            else:
                groups.append((adapter, torch.cat([torch.arange(a, b) for a, b in segs]), decode))
        return LoraBatch(groups)

    def apply(self, layer: int, projection: str, x: torch.Tensor, y: torch.Tensor) -> None:
        """y [T, out] += each adapter's delta of `projection` in `layer` on its rows of x [T, in] (in place)."""
        for adapter, rows, decode in self.groups:
            f = adapter.layers[layer].get(projection)
            if f is None:
                continue
            y[rows] += lora_delta(x[rows], f.a, f.b, decode)   # in float32 (the promoted type), rounded once
