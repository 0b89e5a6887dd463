"""LoraBatch: which rows of one forward pass run under which adapter, and the grouped low-rank product.

Rows of different adapters share the pass: every base projection runs once over all rows, then each adapter's
rows get `y += (x @ A.T) @ B.T` with that adapter's factors (S-LoRA / Punica's grouping, one pair of products per
adapter present). Rows of the base get nothing added.

Batch invariance: a row's delta must come out the same bits whatever rows share the pass. Both products run in
float32 through runtime/batch_invariance.py's row_independent: each factor's matmul is probed once per shape in
the process and called as the probe allows (any call; calls padded to a minimum row count; fixed tiles; one row
a call). The delta is added to the row's output in float32 and rounded once to the output's dtype.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from ..batch_invariance import PROBE_TOTAL, RowTiles, row_independent
from ..linear import DenseLinear
from .adapter import LoraAdapter


def lora_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(x @ a.T) @ b.T in float32 for x [n, in] (any float dtype), a [R, in], b [out, R] -> [n, out]."""
    la, lb = row_independent(DenseLinear(a)), row_independent(DenseLinear(b))
    n = x.shape[0]
    if isinstance(la, RowTiles) or isinstance(lb, RowTiles) or n > PROBE_TOTAL:
        return lb(la(x.float()))
    # both take any call of their minimum rows or more: pad once (zero rows stay zero through both), slice once
    m = max(getattr(la, "min_rows", 1), getattr(lb, "min_rows", 1))
    xp = x.float() if n >= m else F.pad(x.float(), (0, 0, 0, m - n))
    return F.linear(F.linear(xp, a), b)[:n]


class LoraBatch:
    """groups: (adapter, rows) per adapter present, rows a slice (contiguous) or an index tensor into [T]."""

    def __init__(self, groups: list[tuple[LoraAdapter, slice | torch.Tensor]]):
        self.groups = groups

    @staticmethod
    def build(adapters: Sequence[LoraAdapter | None], row_counts: Sequence[int]) -> "LoraBatch | None":
        """From each request's adapter (None: the base) and its row count, requests in row order. None when no
        request runs under an adapter."""
        rows: dict[int, tuple[LoraAdapter, list[tuple[int, int]]]] = {}
        start = 0
        for adapter, n in zip(adapters, row_counts):
            if adapter is not None:
                segs = rows.setdefault(id(adapter), (adapter, []))[1]
                if segs and segs[-1][1] == start:
                    segs[-1] = (segs[-1][0], start + n)
                else:
                    segs.append((start, start + n))
            start += n
        if not rows:
            return None
        groups = []
        for adapter, segs in rows.values():
            if len(segs) == 1:
                groups.append((adapter, slice(*segs[0])))
            else:
                groups.append((adapter, torch.cat([torch.arange(a, b) for a, b in segs])))
        return LoraBatch(groups)

    def apply(self, layer: int, projection: str, x: torch.Tensor, y: torch.Tensor) -> None:
        """y [T, out] += each adapter's delta of `projection` in `layer` on its rows of x [T, in] (in place)."""
        for adapter, rows in self.groups:
            f = adapter.layers[layer].get(projection)
            if f is None:
                continue
            d = lora_delta(x[rows], f.a, f.b)
            y[rows] += d          # in float32 (the promoted type), rounded once into y's dtype
