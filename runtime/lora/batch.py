"""LoraBatch: which rows of one forward pass run under which adapter, and the grouped low-rank product.

Rows of different adapters share the pass: every base projection runs once over all rows, then each adapter's
rows get `y += (x @ A.T) @ B.T` with that adapter's factors (S-LoRA / Punica's grouping, one pair of products per
adapter present). Rows of the base get nothing added.

Batch invariance: a row's delta must come out the same bits whatever rows share the pass. Both products run in
float32 in calls of exactly `tile_rows` rows (zero rows pad the last call), a size at which the matmul computes a
row alike at every position of the call (probed once per shape; one row per call where no tile size does), and
the delta is added to the row's output in float32 and rounded once to the output's dtype.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from .adapter import LoraAdapter

TILE_ROWS = 16
_tiles: dict[tuple[int, int], int] = {}    # (in, out) -> rows per call


def tile_rows(n_in: int, n_out: int) -> int:
    """TILE_ROWS if float32 F.linear computes a row alike at every position of a TILE_ROWS-row call and
    whatever rows share it (measured once per shape in the process), else 1."""
    key = (n_in, n_out)
    if key not in _tiles:
        g = torch.Generator().manual_seed(2)
        t = TILE_ROWS
        x, w = torch.randn(2 * t, n_in, generator=g), torch.randn(n_out, n_in, generator=g)
        ref = F.linear(x[:t], w)
        alike = all(torch.equal(F.linear(x[a:a + t], w)[:t - a], ref[a:]) for a in (1, 3, t // 2, t - 1))
        one = torch.cat([F.linear(x[i:i + 1], w) for i in range(t)])
        _tiles[key] = t if alike and torch.equal(one, ref) else 1
    return _tiles[key]


def tiled_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [n, in] float32 @ w.T [in, out] -> [n, out] float32, in calls of tile_rows(in, out) rows."""
    n, t = x.shape[0], tile_rows(w.shape[1], w.shape[0])
    if n == t:
        return F.linear(x, w)
    tiles = -(-n // t)
    if n % t:
        x = torch.cat([x, x.new_zeros(tiles * t - n, x.shape[1])])
    return torch.cat([F.linear(x[i * t:(i + 1) * t], w) for i in range(tiles)])[:n]


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
            d = tiled_linear(tiled_linear(x[rows].float(), f.a), f.b)
            if isinstance(rows, slice):
                y[rows] = (y[rows].float() + d).to(y.dtype)
            else:
                y.index_copy_(0, rows, (y.index_select(0, rows).float() + d).to(y.dtype))
