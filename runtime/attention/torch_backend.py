"""Attention in plain torch over the paged pool. The CPU path, and the reference the Triton backend is checked
against.

A batch splits into two groups so that no request pays for another's length:
- decode requests (one new token each): on the CPU, when numba is installed, one call of the paged decode
  kernel (kernels/decode_attention_cpu.py), which reads K/V where they lie in the pool; otherwise they are
  gathered into one padded [B, L] batch for one SDPA call per layer. The choice is made once, at construction;
- extend requests (prefill chunks, jump-forward runs) each get their own SDPA call with a causal mask offset by
  their cached prefix, so a 1,000-token prefill in a mixed step does not pad every decode row to 1,000 queries.

Row invariance (`row_invariant`, the engine's default on the CPU): every row, prefill rows included, goes through
the paged kernel, whose result for a row depends only on that row's query and its own columns; SDPA's does not
(its CPU kernel blocks keys and queries by the call's lengths: 3 of 100 rows came out different when a 900-token
prompt was computed in two chunks instead of one), and the shared-prefix cascade is off (a row would come out
otherwise with and without it). Then a request's greedy output does not depend on what shares its steps or how
its prompt was chunked: run_batch gives each document what running it alone gives.

Windowed layers (`window`): the pool keeps every position; the paged kernel reads each row's last `window`
columns through a table of those columns (built once per pass and window, `PagedRows.windowed`), the SDPA paths
mask the rest. Soft-capped scores (`softcap`) take an explicit-scores path where SDPA would run, and the paged
kernel caps them itself; the cascade, whose flash call cannot cap, is then off.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from sglite.kernels import decode_attention_cpu, registry

from ..forward_batch import ForwardBatch
from .base import AttentionBackend


@dataclass
class ExtendRun:
    start: int                 # first row of this request's new tokens in [T]
    length: int                # new tokens
    kv_slots: torch.Tensor     # [L] int64 slots of all its tokens (prefix + new)
    mask: torch.Tensor | None  # [E, L] bool causal mask, None when there is no cached prefix (plain causal)
    windowed: dict = field(default_factory=dict)   # window -> [E, L] bool mask (or None: the window covers it)

    def mask_for(self, window: int | None) -> torch.Tensor | None:
        """The run's mask when its queries see only the last `window` positions (None: plain causal or `mask`)."""
        L = len(self.kv_slots)
        if window is None or window >= L:
            return self.mask
        if window not in self.windowed:
            device = self.kv_slots.device
            q_pos = torch.arange(L - self.length, L, device=device)[:, None]
            k_pos = torch.arange(L, device=device)[None, :]
            self.windowed[window] = (k_pos <= q_pos) & (k_pos > q_pos - window)   # [E, L]
        return self.windowed[window]


@dataclass
class PagedRows:
    """What one paged-kernel call reads for the decode rows: entry b attends over columns [start, seq_lens[b]) of
    table row req_rows[b]."""
    table: np.ndarray                    # [*, ld] int32 (req_to_token, or a windowed copy)
    req_rows: np.ndarray                 # [Bd] int64
    seq_lens: np.ndarray                 # [Bd] int64
    prefix_slots: torch.Tensor | None    # [P]: the cascade's shared columns (start = P), or None
    parallel: bool

    def windowed(self, window: int) -> "PagedRows":
        """The same rows over their last `window` columns only: a [Bd, window] table of those columns (a row's
        columns counted from its first visible one, so its result does not depend on the rows beside it), no
        cascade."""
        table, rows, lens = decode_attention_cpu.window_table(self.table, self.req_rows, self.seq_lens, window)
        return PagedRows(table, rows, lens, None, self.parallel)

    def uncascaded(self) -> "PagedRows":
        return PagedRows(self.table, self.req_rows, self.seq_lens, None, self.parallel)


@dataclass
class TorchAttentionMetadata:
    decode_rows: torch.Tensor | None   # [Bd] int64 rows of [T] attended as one-token decodes (in order)
    decode_slots: torch.Tensor | None  # [Bd, Lmax] int64 (padding -> slot 0); SDPA path only
    decode_mask: torch.Tensor | None   # [Bd, 1, 1, Lmax] bool, True for real keys; SDPA path only
    extends: list[ExtendRun] = field(default_factory=list)
    decode_req_rows: np.ndarray | None = None     # [Bd] int64 req_to_token rows; paged-kernel path only
    decode_seq_lens: np.ndarray | None = None     # [Bd] int64
    decode_table: np.ndarray | None = None        # req_to_token, viewed
    prefix_slots: torch.Tensor | None = None      # [P] int64: the first P slots, the same for every decode request
                                                  # (a shared cached prefix), attended by one cascade GEMM
    decode_parallel: bool | None = None           # the paged kernel on numba's threads (the same bits either way)
    decode_out: tuple | None = None               # the kernel's output arrays, made by the first layer and reused
                                                  # by the next ones (each layer's output is consumed before them),
                                                  # then the output as a tensor view
    decode_q: tuple | None = None                 # (q, q.numpy()): the last query tensor and its view (the fused
                                                  # pass hands every layer the same q)
    paged: dict = field(default_factory=dict)     # (window, softcapped) -> PagedRows, made on first use
    decode_masks: dict = field(default_factory=dict)  # window -> [Bd, 1, 1, Lmax] SDPA decode mask


MIN_SHARED_PREFIX = 64   # shared decode prefixes shorter than this are not worth a cascade GEMM
# decode requests from which a shared prefix goes through the cascade: with the C kernel, reading the prefix once
# per request (from the CPU's cache after the first) beat the cascade's flash call up to ~25 requests (P 650,
# 900 columns each: 20 requests 708 vs 821 us a layer, 32 requests 1155 vs 980); the numba kernel loses at 2
CASCADE_MIN_REQUESTS = {"native": 24, "numba": 2}     # each at least 2: one request shares with no one


class TorchAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool, paged_decode: bool | None = None, row_invariant: bool = False):
        """paged_decode: use the CPU paged decode kernel (None: when the pool is on the CPU and numba is
        installed). row_invariant: every row through that kernel and no cascade (see the top of this file; only
        with the kernel)."""
        super().__init__(kv_pool)
        on_cpu = kv_pool.k_buffer.device.type == "cpu"
        if paged_decode is None:
            paged_decode = on_cpu and registry.use("decode_attention_cpu") and (
                not kv_pool.quantized or decode_attention_cpu.quantized_supported())
        elif paged_decode and kv_pool.quantized and not decode_attention_cpu.quantized_supported():
            raise ValueError("the paged CPU decode kernel reads an int8 / fp8 KV cache only when its C kernel "
                             "builds here (a C compiler, SGLITE_NATIVE_KERNELS not 0)")
        self.paged_decode = decode_attention_cpu.paged_decode_attention if paged_decode else None
        self._threads_matched: tuple[int, int] | None = None   # (thread id, torch threads) numba was matched to
        self._numba_threads = 1
        if paged_decode:
            # numpy views of every layer's buffers, made once: the kernel reads the pool in place
            self._k_bits = [decode_attention_cpu.cache_bits(k) for k in kv_pool.k_buffer]
            self._v_bits = [decode_attention_cpu.cache_bits(v) for v in kv_pool.v_buffer]
            # a quantized pool's per-(slot, head) scales, read by the kernel beside the bytes
            self._scales = ([(decode_attention_cpu.cache_bits(ks), decode_attention_cpu.cache_bits(vs))
                             for ks, vs in zip(kv_pool.k_scale, kv_pool.v_scale)]
                            if kv_pool.quantized else [None] * len(self._k_bits))
            # and the rotation its vectors are stored under: the kernel turns queries and outputs by it
            self._rotation = kv_pool.key_rotation.numpy() if kv_pool.key_rotation is not None else None
            decode_attention_cpu.warm_up()
        native = paged_decode and decode_attention_cpu.native_kernel() is not None
        self.row_invariant = bool(row_invariant and paged_decode)
        # the cascade's flash call reads an unquantized cache
        self.cascade_min_requests = (CASCADE_MIN_REQUESTS["native" if native else "numba"]
                                     if not self.row_invariant and not kv_pool.quantized else float("inf"))

    def _parallel_threads(self) -> int:
        """The threads the kernel's parallel entry point gets on this thread: torch's count here (matched once
        per thread and count; the check costs microseconds, so not on every call)."""
        key = (threading.get_ident(), torch.get_num_threads())
        if self._threads_matched != key:
            self._threads_matched = key
            self._numba_threads = decode_attention_cpu.match_torch_threads()
        return self._numba_threads

    @staticmethod
    def _shared_prefix(table: torch.Tensor, rows: np.ndarray, seq_lens: np.ndarray) -> torch.Tensor | None:
        """The slots every decode request starts with (the radix cache gives requests that share a prefix the
        same slots), if there are at least MIN_SHARED_PREFIX of them and two requests; each keeps >= 1 own."""
        if len(rows) < 2 or int(seq_lens.min()) - 1 < MIN_SHARED_PREFIX:
            return None
        head = table[torch.from_numpy(rows), :int(seq_lens.min()) - 1]                 # [Bd, Lmin]
        differs = (head != head[0]).any(0).nonzero()
        shared = int(differs[0]) if len(differs) else head.shape[1]
        return head[0, :shared].long() if shared >= MIN_SHARED_PREFIX else None

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        """Decode queries: every row of a decoding request (its pending, jump-forward and draft tokens), and any
        one-token extend, each attending to its own prefix [0, position] exactly as a lone one-token decode does,
        so a token's attention does not depend on how many tokens its request computes in the pass. Extends:
        the prompt chunks of prefilling requests, causal over their cached prefix."""
        device = fb.input_ids.device
        table = fb.req_to_token
        rows_cpu = fb.req_pool_indices.tolist()
        q_rows, q_req_rows, q_seq_lens = [], [], []
        offset = 0
        meta = TorchAttentionMetadata(None, None, None)
        for b, (p, e) in enumerate(zip(fb.prefix_lens_cpu, fb.extend_lens_cpu)):
            if e == 1 or b >= fb.num_prefill or self.row_invariant:
                q_rows.extend(range(offset, offset + e))
                q_req_rows.extend([rows_cpu[b]] * e)
                q_seq_lens.extend(range(p + 1, p + e + 1))
            else:
                L = p + e
                kv = table[rows_cpu[b], :L].to(torch.int64)
                mask = None
                if p:
                    q_pos = torch.arange(p, L, device=device)
                    mask = torch.arange(L, device=device)[None, :] <= q_pos[:, None]  # [E, L]
                meta.extends.append(ExtendRun(offset, e, kv, mask))
            offset += e
        if q_rows:
            meta.decode_rows = torch.tensor(q_rows, dtype=torch.int64, device=device)
        if q_rows and self.paged_decode is not None:
            meta.decode_req_rows = np.array(q_req_rows, dtype=np.int64)
            meta.decode_seq_lens = np.array(q_seq_lens, dtype=np.int64)
            meta.decode_table = fb.req_to_token.numpy()
            # a request's rows attend exactly as its one-row decode would: the cascade is chosen by the number of
            # distinct requests, not of rows; the kernel's two entry points return the same bits, so the work
            # (the columns after the cascade's) alone decides whether the call is worth numba's threads
            if len(set(q_req_rows)) >= self.cascade_min_requests:
                meta.prefix_slots = self._shared_prefix(table, meta.decode_req_rows, meta.decode_seq_lens)
            start = 0 if meta.prefix_slots is None else len(meta.prefix_slots)
            meta.decode_parallel = (decode_attention_cpu.parallel_worth_it(meta.decode_seq_lens, start,
                                                                           self.kv_pool.k_buffer[0].shape[1])
                                    and self._parallel_threads() > 1)
        elif q_rows:
            seq = torch.tensor(q_seq_lens, device=device)
            L = int(seq.max())
            req_rows = torch.tensor(q_req_rows, dtype=torch.int64, device=device)
            slots = table[req_rows, :L].to(torch.int64)                              # [Bd, L]
            valid = torch.arange(L, device=device)[None, :] < seq[:, None]           # [Bd, L]
            meta.decode_slots = torch.where(valid, slots, torch.zeros_like(slots))
            meta.decode_mask = valid[:, None, None, :]
        fb.attn_metadata = meta

    def forward(self, q, k, v, layer_id, fb, scale, window=None, softcap=None):
        self.kv_pool.store(layer_id, fb.out_cache_loc, k, v)
        return self.attend(q, layer_id, fb, scale, window, softcap)

    def pool_bits(self, layer_id: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Layer `layer_id`'s K and V buffers as numpy views of their bits (for CPU kernels that write the pool in
        place), or None when the paged CPU kernel is off or the pool holds another format than the model's
        activations (the kernels then write a staging buffer that `kv_pool.store` converts)."""
        if self.paged_decode is None or not self.kv_pool.direct:
            return None
        return self._k_bits[layer_id], self._v_bits[layer_id]

    def fused_ready(self) -> bool:
        return self.paged_decode is not None

    def attend(self, q, layer_id, fb, scale, window=None, softcap=None):
        """forward() once K/V of the new tokens are in the pool (a fused CPU layer writes them itself). The pool's
        layer views are made only where a path reads them: on a short context two tensor views cost more than
        the paged kernel's arithmetic."""
        m: TorchAttentionMetadata = fb.attn_metadata
        if m.decode_rows is not None and len(m.extends) == 0:
            return self._decode(q, m, scale, layer_id, window, softcap)   # pure decode: rows are [T] in order
        pool = self.kv_pool
        out = torch.empty_like(q)
        if m.decode_rows is not None:
            out[m.decode_rows] = self._decode(q[m.decode_rows], m, scale, layer_id, window, softcap)
        for run in m.extends:
            qs = q[run.start:run.start + run.length].to(pool.dtype).transpose(0, 1)[None]  # [1, Hq, E, D]
            keys, values = pool.gather(layer_id, run.kv_slots)                            # [L, Hkv, D]
            keys, values = keys.transpose(0, 1)[None], values.transpose(0, 1)[None]        # [1, Hkv, L, D]
            o = _sdpa(qs, keys, values, run.mask_for(window), scale, softcap)
            out[run.start:run.start + run.length] = o[0].transpose(0, 1)
        return out

    def _paged_rows(self, m: TorchAttentionMetadata, window: int | None, softcap: float | None) -> PagedRows:
        """The decode rows as the paged kernel reads them for a layer with this window and soft-cap, made once
        per pass (the full view first: the others derive from it)."""
        key = (window, softcap is not None)
        if key not in m.paged:
            if (None, False) not in m.paged:
                m.paged[(None, False)] = PagedRows(m.decode_table, m.decode_req_rows, m.decode_seq_lens,
                                                   m.prefix_slots, m.decode_parallel)
            full = m.paged[(None, False)]
            if window is not None and int(full.seq_lens.max()) > window:
                m.paged[key] = full.windowed(window)
            else:
                m.paged[key] = full if softcap is None else full.uncascaded()
        return m.paged[key]

    def _decode(self, q, m: TorchAttentionMetadata, scale: float, layer_id: int, window: int | None = None,
                softcap: float | None = None) -> torch.Tensor:
        """q: [Bd, Hq, D] one query per request -> [Bd, Hq, D]."""
        if self.paged_decode is not None:
            rows = self._paged_rows(m, window, softcap)
            if rows.prefix_slots is None and q.dtype == torch.float32 and q.is_contiguous():
                return self._decode_into(q, layer_id, m, rows, scale, softcap)
            return self.paged_decode(q, self.kv_pool.k_buffer[layer_id], self.kv_pool.v_buffer[layer_id],
                                     self._k_bits[layer_id], self._v_bits[layer_id], rows.table, rows.req_rows,
                                     rows.seq_lens, scale, rows.prefix_slots, rows.parallel, softcap=softcap,
                                     scales=self._scales[layer_id], rotation=self._rotation)
        pool = self.kv_pool
        # padded key columns gather slot 0; their weights are 0 after softmax, but 0 * NaN would poison the row,
        # and padding writes may have left anything there
        pool.zero_slot(layer_id, 0)
        shape = (*m.decode_slots.shape, *pool.k_buffer.shape[2:])  # index_select beats advanced indexing ~2x
        keys, values = pool.gather(layer_id, m.decode_slots.view(-1))
        keys = keys.view(shape).transpose(1, 2)                                            # [Bd, Hkv, L, D]
        values = values.view(shape).transpose(1, 2)
        mask = m.decode_mask
        if window is not None:
            if window not in m.decode_masks:      # [Bd, 1, 1, L]: also the columns before the row's window
                seq = m.decode_mask.sum(-1, keepdim=True)
                cols = torch.arange(mask.shape[-1], device=mask.device)
                m.decode_masks[window] = mask & (cols > seq - 1 - window)
            mask = m.decode_masks[window]
        return _sdpa(q[:, :, None, :], keys, values, mask, scale, softcap)[:, :, 0, :]

    def _decode_into(self, q: torch.Tensor, layer_id: int, m: TorchAttentionMetadata, rows: PagedRows,
                     scale: float, softcap: float | None) -> torch.Tensor:
        """The paged kernel without a cascade, q [Bd, Hq, D] float32 contiguous (one query per request) ->
        [Bd, Hq, D], into the pass's arrays (made by the first layer; the output tensor is a view of them,
        overwritten by the next layer, which runs after this one's output is consumed)."""
        if m.decode_q is None or m.decode_q[0] is not q:
            m.decode_q = (q, q.numpy())     # a view: later writes into q (the fused pass's next layer) show
        if m.decode_out is None:
            B, Hq = q.shape[:2]
            arrays = (np.empty(q.shape, np.float32), np.empty((B, Hq), np.float32), np.empty((B, Hq), np.float32))
            m.decode_out = (arrays, torch.from_numpy(arrays[0]))
        decode_attention_cpu.decode_attention_into(m.decode_q[1], self._k_bits[layer_id], self._v_bits[layer_id],
                                                   rows.table, rows.req_rows, rows.seq_lens, scale,
                                                   m.decode_out[0], rows.parallel, softcap=softcap,
                                                   scales=self._scales[layer_id], rotation=self._rotation)
        return m.decode_out[1]


def _sdpa(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scale: float,
          softcap: float | None) -> torch.Tensor:
    """Attention of q [B, Hq, E, D] over keys, values [B, Hkv, L, D] (mask [.., E, L] bool, True where a key is
    seen; None: causal from the end): SDPA, or with `softcap` explicit scores, capped, in float32."""
    gqa = q.shape[1] != keys.shape[1]
    if softcap is None:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=mask is None,
                                              scale=scale, enable_gqa=gqa)
    if gqa:
        keys = keys.repeat_interleave(q.shape[1] // keys.shape[1], dim=1)
        values = values.repeat_interleave(q.shape[1] // values.shape[1], dim=1)
    scores = torch.matmul(q.float(), keys.float().transpose(-1, -2)) * scale          # [B, Hq, E, L]
    scores = torch.tanh(scores / softcap) * softcap
    if mask is None:
        E, L = scores.shape[-2:]
        mask = torch.arange(L, device=q.device)[None, :] <= torch.arange(L - E, L, device=q.device)[:, None]
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1), values.float()).to(q.dtype)
