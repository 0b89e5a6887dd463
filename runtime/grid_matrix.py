"""A matrix kept as its file's integer block grid, read row by row: the token embedding and the output head of a
GGUF model at about the file's own size, not in float32.

    m = GridMatrix(q, scale, lo, bits)     # q [R, C] uint8; scale, lo [R, C / group] float32 (gguf_blocks.py)
    m[ids]                                 # [len(ids), C] float32: those rows, exactly the file's values
    for start, rows in m.chunks(8192): ... # the whole matrix in float32 slices (never all at once)

Values are computed as gguf.quants computes them: q * scale + lo for 4-bit grids, (q - 128) * scale for 8-bit
grids through zero (lo = -128 * scale; Q6_K, Q8_0), in float32 with no fused multiply-add, so a row read here
equals the dequantized tensor's row bit for bit. A 128,256 x 2,048 Q6_K embedding is 0.39 GB this way
(q 1 byte a value, two float32 per 16 values) against 1.05 GB in float32."""
from __future__ import annotations

import torch


class GridMatrix:
    def __init__(self, q: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor, bits: int):
        rows, cols = q.shape
        if scale.shape != lo.shape or scale.shape[0] != rows or cols % scale.shape[1]:
            raise ValueError(f"grid shapes disagree: q {tuple(q.shape)}, scale {tuple(scale.shape)}, "
                             f"lo {tuple(lo.shape)}")
        self.q = q.to(torch.uint8).contiguous()
        self.scale, self.lo = scale.float().contiguous(), lo.float().contiguous()
        self.bits = bits
        self.group = cols // scale.shape[1]
        self.sym = bits == 8 and bool(torch.equal(self.lo, -128 * self.scale))
        self.shape = (rows, cols)
        self.dtype = torch.float32
        self.device = q.device

    @classmethod
    def of(cls, grid) -> "GridMatrix":
        """From a (q, scale, lo, bits) grid as gguf_blocks reads it."""
        q, scale, lo, bits = grid
        return cls(q, scale, lo, bits)

    def __getitem__(self, idx) -> torch.Tensor:
        """The rows `idx` (an index tensor or list, any shape) as float32 [*idx.shape, C]."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        flat = idx.reshape(-1)
        return self._values(self.q[flat], self.scale[flat], self.lo[flat]).view(*idx.shape, self.shape[1])

    def chunks(self, rows: int):
        """(first row, float32 [n, C]) slices of at most `rows` rows, in order."""
        for start in range(0, self.shape[0], rows):
            end = min(start + rows, self.shape[0])
            yield start, self._values(self.q[start:end], self.scale[start:end], self.lo[start:end])

    def _values(self, q: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
        n = q.shape[0]
        v = q.view(n, -1, self.group).float()                                    # [n, groups, group]
        if self.sym:
            v.sub_(128).mul_(scale[..., None])
        else:
            v.mul_(scale[..., None]).add_(lo[..., None])
        return v.view(n, self.shape[1])

    @property
    def nbytes(self) -> int:
        return self.q.numel() + 4 * (self.scale.numel() + (0 if self.sym else self.lo.numel()))
