"""Apply a packed token bitmask to logits in place: -inf wherever the grammar forbids a token.

Layout (shared with sglite.runtime.constrained's `fill_next_token_bitmask`):
    logits:  [B, V] float32 / float16 / bfloat16, last dim contiguous
    bitmask: [B, W] int32 with W >= ceil(V / 32); bit j of word w set <=> token 32*w + j is allowed
             (bits past V are ignored).

`apply_token_bitmask` picks the Triton kernel for CUDA tensors and the torch reference elsewhere.
Triton is imported only when the kernel is first used, so the CPU path needs no triton.
"""
import functools

import torch

_LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None) -> None:
    if logits.dim() != 2 or bitmask.dim() != 2:
        raise ValueError(f"apply_token_bitmask wants logits [B, V] and bitmask [B, ceil(V/32)], got "
                         f"{tuple(logits.shape)} and {tuple(bitmask.shape)}; use .view(-1, V) for extra dims")
    if indices is not None:
        if indices.dim() != 1 or indices.shape[0] != bitmask.shape[0] or indices.dtype not in (torch.int32,
                                                                                                torch.int64):
            raise ValueError(f"indices must be [{bitmask.shape[0]}] int32/int64 (one logits row per bitmask row),"
                             f" got {indices.dtype} {tuple(indices.shape)}")
        if indices.device != logits.device:
            raise ValueError(f"indices on {indices.device}, logits on {logits.device}; use indices.to(logits.device)")
    elif logits.shape[0] != bitmask.shape[0]:
        raise ValueError(f"logits has {logits.shape[0]} rows but bitmask has {bitmask.shape[0]}; pass "
                         f"indices= (the logits row of each bitmask row), or one bitmask row per logits row "
                         f"(all -1 words = no constraint)")
    words = (logits.shape[1] + 31) // 32
    if bitmask.shape[1] < words:
        raise ValueError(f"bitmask has {bitmask.shape[1]} words per row, vocab {logits.shape[1]} needs "
                         f"{words} (= ceil(V/32)); allocate it with that many columns")
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}; use bitmask.to(torch.int32) "
                        f"(bit patterns are kept by .view(torch.int32) on a uint32 buffer)")
    if logits.dtype not in _LOGIT_DTYPES:
        raise TypeError(f"logits must be one of {_LOGIT_DTYPES}, got {logits.dtype}; use logits.float()")
    if logits.device != bitmask.device:
        raise ValueError(f"logits on {logits.device} but bitmask on {bitmask.device}; move the bitmask with "
                         f"bitmask.to(logits.device, non_blocking=True)")


@functools.cache
def _forbidden_byte_table(device: torch.device) -> torch.Tensor:
    """[256] int64: byte j of entry i is 1 where bit j of i is 0 (token forbidden), else 0."""
    bits = (torch.arange(256, device=device)[:, None] >> torch.arange(8, device=device)) & 1       # [256, 8]
    return ((1 - bits) << (8 * torch.arange(8, device=device))).sum(1)


def apply_token_bitmask_torch(logits: torch.Tensor, bitmask: torch.Tensor,
                              indices: torch.Tensor | None = None) -> None:
    """Reference and CPU path. Mutates `logits`: disallowed tokens become -inf. Vectorised, no Python loops.
    `indices` [R]: bitmask row r applies to logits row indices[r] (other rows untouched); None: row r to row r."""
    _check(logits, bitmask, indices)
    if indices is not None:
        rows = logits[indices]
        apply_token_bitmask_torch(rows, bitmask)
        logits[indices] = rows
        return
    B, V = logits.shape
    if B == 0 or V == 0:
        return
    # little-endian: byte k of word w holds tokens 32w + 8k .. 32w + 8k + 7. One int64 lookup per byte yields
    # those 8 tokens' forbidden flags as 8 bytes, which reinterpret as 8 bools (no per-bit arithmetic).
    packed = bitmask.contiguous().view(torch.uint8).reshape(-1).to(torch.int64)          # [B * 4W]
    flags = torch.index_select(_forbidden_byte_table(bitmask.device), 0, packed)         # [B * 4W] int64
    forbidden = flags.view(torch.uint8).view(torch.bool).view(B, -1)[:, :V]               # [B, 32W] -> [B, V]
    logits.masked_fill_(forbidden, float("-inf"))


@functools.cache
def _kernel():
    global tl  # jit bodies resolve names through module globals (Triton before ~3.3 ignores closures)
    import triton
    import triton.language as tl

    @triton.jit
    def token_bitmask_kernel(logits_ptr, mask_ptr, indices_ptr, V, logits_row_stride, mask_row_stride,
                             HAS_INDICES: tl.constexpr, BLOCK: tl.constexpr):
        # grid: (R, cdiv(V, BLOCK)); one program masks BLOCK vocab entries of one row
        row = tl.program_id(0)
        logits_row = row.to(tl.int64)
        if HAS_INDICES:
            logits_row = tl.load(indices_ptr + row).to(tl.int64)
        offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        in_vocab = offs < V
        words = tl.load(mask_ptr + row * mask_row_stride + offs // 32, mask=in_vocab, other=-1)
        bit = (words >> (offs % 32)) & 1
        # store only the forbidden entries: a lightly constrained row costs reads of the mask alone
        tl.store(logits_ptr + logits_row * logits_row_stride + offs, float("-inf"), mask=in_vocab & (bit == 0))

    return token_bitmask_kernel


def apply_token_bitmask_triton(logits: torch.Tensor, bitmask: torch.Tensor,
                               indices: torch.Tensor | None = None) -> None:
    """Triton kernel. Same contract as the reference; rows may be strided, the vocab dim must be contiguous."""
    _check(logits, bitmask, indices)
    if logits.stride(1) != 1 or bitmask.stride(1) != 1:
        raise ValueError("apply_token_bitmask_triton needs a contiguous last dim in logits and bitmask; "
                         "call .contiguous() (and copy the result back into your logits)")
    R, V = bitmask.shape[0], logits.shape[1]
    if R == 0 or V == 0:
        return
    if indices is not None and not indices.is_contiguous():
        indices = indices.contiguous()
    block = 4096
    _kernel()[(R, (V + block - 1) // block)](logits, bitmask, indices if indices is not None else bitmask, V,
                                             logits.stride(0), bitmask.stride(0), HAS_INDICES=indices is not None,
                                             BLOCK=block)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """In place: logits[b, t] = -inf where bit t of bitmask[b] is not set (with `indices`, logits row
    indices[b]). Triton on CUDA, torch elsewhere."""
    if logits.is_cuda:
        apply_token_bitmask_triton(logits, bitmask, indices)
    else:
        apply_token_bitmask_torch(logits, bitmask, indices)


def allocate_token_bitmask(batch_size: int, vocab_size: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """An all-allowed bitmask [batch_size, ceil(vocab_size/32)] int32 (every bit set)."""
    return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32, device=device)


__all__ = ["apply_token_bitmask", "apply_token_bitmask_torch", "apply_token_bitmask_triton",
           "allocate_token_bitmask"]
