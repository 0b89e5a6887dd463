"""LoraBatch: which rows of one forward pass run under which adapter, and the grouped low-rank product.

Rows of different adapters share the pass: every base projection runs once over all rows, then each adapter's
rows get `y += (x @ A.T) @ B.T` with that adapter's factors (S-LoRA / Punica's grouping, one pair of products per
adapter present). Rows of the base get nothing added.

Batch invariance: a row's delta must come out the same bits whatever rows share the pass. Both products run in
float32 in calls of exactly `tile_rows` rows (zero rows pad the last call), a size at which the matmul computes a
row alike at every position of the call (probed once per shape; one row per call where no tile size does), and
the delta is added to the row's output in float32 and rounded once to the output's dtype. The tile depends on
the row's phase, which its request decides, never on the pass: prefill rows go in tiles of PREFILL_TILE_ROWS,
decode rows (a request's next token and its draft tokens: a handful per adapter) in tiles of DECODE_TILE_ROWS,
which cost a decode step with many adapters about half what 16-row tiles do.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from .adapter import LoraAdapter

PREFILL_TILE_ROWS = 16
DECODE_TILE_ROWS = 4
_tiles: dict[tuple[int, int, int], int] = {}    # (in, out, wanted) -> rows per call


def tile_rows(n_in: int, n_out: int, wanted: int = PREFILL_TILE_ROWS) -> int:
    """`wanted` if float32 F.linear computes a row alike at every position of a call of that many rows, whatever
    rows share it (measured once per shape in the process), else 1 (a call per row: alike by construction)."""
    key = (n_in, n_out, wanted)
    if key not in _tiles:
        g = torch.Generator().manual_seed(2)
        t = wanted
        x, w = torch.randn(2 * t, n_in, generator=g), torch.randn(n_out, n_in, generator=g)
        ref = F.linear(x[:t], w)
        alike = all(torch.equal(F.linear(x[a:a + t], w)[:t - a], ref[a:]) for a in {1, 3 % t, t // 2, t - 1} if a)
        _tiles[key] = t if alike else 1
    return _tiles[key]


def _pad_rows(x: torch.Tensor, t: int) -> torch.Tensor:
    """x with zero rows appended up to a multiple of t."""
    extra = -x.shape[0] % t
    return F.pad(x, (0, 0, 0, extra)) if extra else x


def _tiles_of(x: torch.Tensor, w: torch.Tensor, t: int) -> torch.Tensor:
    """F.linear(x, w) in calls of t rows; x's rows are a multiple of t."""
    if x.shape[0] == t:
        return F.linear(x, w)
    return torch.cat([F.linear(x[i:i + t], w) for i in range(0, x.shape[0], t)])


def lora_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tile: int = PREFILL_TILE_ROWS) -> torch.Tensor:
    """(x @ a.T) @ b.T in float32 for x [n, in] (any float dtype), a [R, in], b [out, R] -> [n, out], each
    product in calls of its tile_rows(.., tile) (the rows padded once for both; zero rows stay zero)."""
    n = x.shape[0]
    ta, tb = tile_rows(a.shape[1], a.shape[0], tile), tile_rows(b.shape[1], b.shape[0], tile)
    xp = _pad_rows(x.float(), max(ta, tb))       # tile sizes are 1 or `tile`: the larger is a multiple
    return _tiles_of(_tiles_of(xp, a, ta), b, tb)[:n]


class LoraBatch:
    """groups: (adapter, rows, tile) per adapter and phase present, rows a slice (contiguous) or an index tensor
    into [T], tile the rows per call of that phase."""

    def __init__(self, groups: list[tuple[LoraAdapter, slice | torch.Tensor, int]]):
        self.groups = groups

    @staticmethod
    def build(adapters: Sequence[LoraAdapter | None], row_counts: Sequence[int],
              decode_from: int | None = None) -> "LoraBatch | None":
        """From each request's adapter (None: the base) and its row count, requests in row order; rows from
        `decode_from` on are decode rows (None: none are). None when no request runs under an adapter."""
        rows: dict[tuple[int, int], tuple[LoraAdapter, list[tuple[int, int]]]] = {}
        start = 0
        for adapter, n in zip(adapters, row_counts):
            if adapter is not None:
                tile = DECODE_TILE_ROWS if decode_from is not None and start >= decode_from else PREFILL_TILE_ROWS
                segs = rows.setdefault((id(adapter), tile), (adapter, []))[1]
                if segs and segs[-1][1] == start:
                    segs[-1] = (segs[-1][0], start + n)
                else:
                    segs.append((start, start + n))
            start += n
        if not rows:
            return None
        groups = []
        for (_, tile), (adapter, segs) in rows.items():
            if len(segs) == 1:
                groups.append((adapter, slice(*segs[0]), tile))
            else:
                groups.append((adapter, torch.cat([torch.arange(a, b) for a, b in segs]), tile))
        return LoraBatch(groups)

    def apply(self, layer: int, projection: str, x: torch.Tensor, y: torch.Tensor) -> None:
        """y [T, out] += each adapter's delta of `projection` in `layer` on its rows of x [T, in] (in place)."""
        for adapter, rows, tile in self.groups:
            f = adapter.layers[layer].get(projection)
            if f is None:
                continue
            d = lora_delta(x[rows], f.a, f.b, tile)
            if y.dtype == torch.float32:
                y[rows] += d
            elif isinstance(rows, slice):
                y[rows] = (y[rows].float() + d).to(y.dtype)
            else:
                y.index_copy_(0, rows, (y.index_select(0, rows).float() + d).to(y.dtype))
