"""Paged decode attention for the CPU: one query token per request, read straight from the KV pool.

Same signature and layout as `decode_attention_torch` (the reference, in decode_attention.py):
    q:                [B, Hq, D]           the one new token of each request (its K/V already stored)
    k_cache, v_cache: [num_slots, Hkv, D]  one layer's pool buffers (float32 or bfloat16); Hq % Hkv == 0
    req_to_token:     [max_requests, max_context] int32; row req_pool_indices[b], columns :seq_lens[b]
    out:              [B, Hq, D]           same dtype as q

The torch path gathers every request's keys into a padded [B, L, Hkv, D] copy per layer (and SDPA's CPU kernel
pays a large fixed cost per call for one query). Here a C kernel (decode_attention_cpu.c, built on the machine
by kernels/native.py) or, where it cannot be built, a numba kernel (compiled once, cached on disk) splits each
row's columns into chunks of CHUNK keys and runs one job per (row, KV head, chunk), in parallel when there is
enough work: it walks the slots in req_to_token and reads each K and V row once, where it lies, for all Hq/Hkv
query heads of the group; softmax in float32; the chunks are merged in order. Requests that share a cached
prefix read the same rows, which then come from the CPU's cache. The C kernel widens a job's keys and values once
for all the rows of its request (a decode row and its draft rows) and computes 16 scores at a time with no
horizontal sums per key (on a CPU with AVX-512 BF16, the scores of bf16 queries by bf16 dot products straight
from the pool): in a batch-1 step at ~900 tokens of context ~1.5x the numba kernel's speed, more for a run of
draft rows. Each kernel gives a row the same bits whatever rows share its call; the two kernels differ from each
other in the last bits.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import torch

from .decode_attention import _check
from .native import NativeLibrary


try:
    import numba
    import numba.extending
except ImportError:      # the kernel is optional: the torch backend falls back to gather + SDPA
    numba = None


def available() -> bool:
    """Whether numba is importable (the CPU kernels' one dependency: it runs the numba kernel, and calls the C one
    without ctypes' per-call cost)."""
    return numba is not None


def _declare(lib: ctypes.CDLL) -> None:
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    f32 = ctypes.c_float
    lib.attn_decode.argtypes = [p, p, p, p, p, p, i32, i32, p, i64, p, p, i64, i32, i32, i32, i64, f32, f32, p, p,
                                p, i32]
    lib.attn_decode.restype = i32


_NATIVE = NativeLibrary(Path(__file__).with_name("decode_attention_cpu.c"), _declare, ("-ffp-contract=fast",),
                        isa_symbol="attn_decode_isa")
_native_kernel: list = []        # [the jitted caller of the C kernel, or None where it cannot be built]
MAX_NATIVE_HEAD_DIM = 256        # the C kernel takes head dims that are multiples of 16 up to this


def native_kernel():
    """The C kernel as a numba function of the numpy arrays (q, k_bits, v_bits, table, rows, seq_lens, start,
    scale, softcap (0: off), out, lse_max, lse_sum, threads) -> status (0, or -1: out of memory), or None when it cannot be built
    (no C compiler, SGLITE_NATIVE_KERNELS=0) or numba is missing. Unchecked: callers pass what
    decode_attention_into takes, with a head dim that is a multiple of 16 up to MAX_NATIVE_HEAD_DIM."""
    if not _native_kernel:
        lib = _NATIVE.load() if numba is not None else None
        call = None
        if lib is not None:
            fn = lib.attn_decode

            @numba.njit
            def call(q, k_bits, v_bits, k_scale, v_scale, rot, quant, table, rows, seq_lens, start, scale, softcap,
                     out, lse_max, lse_sum, threads):
                return fn(q.ctypes.data, k_bits.ctypes.data, v_bits.ctypes.data, k_scale.ctypes.data,
                          v_scale.ctypes.data, rot.ctypes.data * (rot.shape[0] > 1), k_bits.itemsize, quant, table.ctypes.data, table.shape[1],
                          rows.ctypes.data, seq_lens.ctypes.data, q.shape[0], q.shape[1], k_bits.shape[1],
                          q.shape[2], start, scale, softcap, out.ctypes.data, lse_max.ctypes.data,
                          lse_sum.ctypes.data, threads)
        _native_kernel.append(call)
    return _native_kernel[0]


def native_isa() -> str | None:
    """The ISA path of the C kernel ("avx512_bf16", "avx512", "avx2", "generic"), building it on first call; None
    where the numba kernel runs instead (the C one does not build, or numba, its caller, is missing)."""
    return _NATIVE.isa() if numba is not None else None


def match_torch_threads() -> int:
    """Gives the parallel entry point, on the calling thread, as many threads as torch uses there, and returns
    that count. numba's count is per thread, and a thread that never set it runs prange on every core: an engine
    told to use 1 thread stepped on a loop thread whose attention ran on 2, its extra worker spinning after each
    call (a third of a core, and two 1-thread replicas on 2 cores then fought over them)."""
    threads = torch.get_num_threads()
    n = min(threads, numba.config.NUMBA_NUM_THREADS)
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
        torch.set_num_threads(threads)   # starting numba's OpenMP layer resets this thread's OpenMP count
    return n


CHUNK = 256              # keys per job: a row's columns split into chunks of this many (from its first column),
                         # each chunk one job per KV head, merged in chunk order; a function of the row's own
                         # length only, so a row's result does not depend on the rows beside it
PARALLEL_MIN_WORK = 1536  # key rows x KV heads from which a call runs on numba's threads: below that, the
                          # hand-off between torch's and numba's thread pools costs more than it saves
LOG2E = 1.4426950408889634

if numba is not None:
    from llvmlite import ir as _ir

    @numba.extending.intrinsic
    def _f32_bits(typingctx, bits):
        """The float32 whose bits are the 32-bit integer `bits` (a bitcast, which numba has no word for)."""
        if not isinstance(bits, numba.types.Integer) or bits.bitwidth != 32:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], _ir.FloatType())
        return numba.types.float32(bits), codegen

    def _load_rows(buf, table, row, at, count, kh, dst):
        """K or V rows [slot, kh, :] of table[row, at:at + count] into dst[:count] [*, D] as float32 bits (uint32;
        jitted code only; see the overload below)."""
        raise NotImplementedError("_load_rows runs inside numba kernels only")

    @numba.extending.overload(_load_rows, inline="always")
    def _load_rows_for(buf, table, row, at, count, kh, dst):
        # buf holds float32 bits (int32) or bfloat16 bits (int16), and a bfloat16 is the top half of a float32
        if buf.dtype == numba.types.int16:
            def bf16_rows(buf, table, row, at, count, kh, dst):
                for j in range(count):
                    src = buf[table[row, at + j], kh]
                    for d in range(src.shape[0]):
                        dst[j, d] = np.uint32(np.uint16(src[d])) << np.uint32(16)
            return bf16_rows

        def f32_rows(buf, table, row, at, count, kh, dst):
            for j in range(count):
                src = buf[table[row, at + j], kh]
                for d in range(src.shape[0]):
                    dst[j, d] = np.uint32(src[d])
        return f32_rows

    @numba.njit(fastmath=True, inline="always")
    def _exp_neg(x):
        """exp(x) for float32 x <= 0, within 3e-7 + 1e-7 |x| relative (t = x log2(e) rounds in float32; scores
        that far below the max weigh nothing), down to 2^-126, where it stops: 2^t split into round(t) (the
        exponent bits) and a fraction in [-1/2, 1/2] (a degree-7 series). Unlike np.exp, which calls libm once
        per element, this vectorizes."""
        t = max(x * np.float32(LOG2E), np.float32(-126.0))
        n = np.floor(t + np.float32(0.5))
        f = (t - n) * np.float32(0.6931471805599453)       # 2^(t - n) = e^f, |f| <= ln(2) / 2
        p = np.float32(1.0 / 5040.0)
        p = p * f + np.float32(1.0 / 720.0)
        p = p * f + np.float32(1.0 / 120.0)
        p = p * f + np.float32(1.0 / 24.0)
        p = p * f + np.float32(1.0 / 6.0)
        p = p * f + np.float32(0.5)
        p = p * f + np.float32(1.0)
        p = p * f + np.float32(1.0)
        return p * _f32_bits(np.int32((np.int32(n) + np.int32(127)) << np.int32(23)))

    # compiled once, not inlined into the two entry points: each would vectorize its own copy differently
    @numba.njit(fastmath=True, cache=True)
    def _job(b, kh, c, q, k_buf, v_buf, table, rows, seq_lens, start, scale, softcap, acc, cmax, csum):
        """Row b's G query heads of KV head kh over chunk c of its columns: [lo, hi) = start + c * CHUNK + [0,
        CHUNK) cut at seq_lens[b]. Writes acc[b, kh, c] [G, D] = sum of exp(score - m) * v, cmax[b, kh, c] [G]
        = m (the chunk's score max), csum[b, kh, c] [G] = sum of exp(score - m). Keys go four at a time, their
        rows widened to float32 once for all G query heads (widening each element per head cost a sixth of the
        kernel; the sums are the same bits either way): one load of each query element for four dot products,
        one load and store of each accumulator for four values."""
        Hq, D = q.shape[1], q.shape[2]
        G = Hq // k_buf.shape[1]
        row = rows[b]
        lo = start + c * CHUNK
        hi = min(lo + CHUNK, seq_lens[b])
        n = hi - lo
        scores = np.empty((G, n), np.float32)
        qg = np.empty((G, D), np.float32)            # the group's queries, pre-scaled
        for g in range(G):
            for d in range(D):
                qg[g, d] = q[b, kh * G + g, d] * scale
        rows4 = np.empty((4, D), np.float32)         # four keys' (or values') rows, widened once for all G heads
        bits4 = rows4.view(np.uint32)
        i = 0
        while i + 4 <= n:
            _load_rows(k_buf, table, row, lo + i, 4, kh, bits4)
            for g in range(G):
                a0 = a1 = a2 = a3 = np.float32(0.0)
                for d in range(D):
                    qd = qg[g, d]
                    a0 += qd * rows4[0, d]
                    a1 += qd * rows4[1, d]
                    a2 += qd * rows4[2, d]
                    a3 += qd * rows4[3, d]
                scores[g, i], scores[g, i + 1], scores[g, i + 2], scores[g, i + 3] = a0, a1, a2, a3
            i += 4
        while i < n:
            _load_rows(k_buf, table, row, lo + i, 1, kh, bits4)
            for g in range(G):
                a0 = np.float32(0.0)
                for d in range(D):
                    a0 += qg[g, d] * rows4[0, d]
                scores[g, i] = a0
            i += 1
        if softcap > 0:
            for g in range(G):
                for i in range(n):
                    scores[g, i] = softcap * np.tanh(scores[g, i] / softcap)
        for g in range(G):
            m = scores[g, 0]
            for i in range(1, n):
                m = max(m, scores[g, i])
            total = np.float32(0.0)
            for i in range(n):
                e = _exp_neg(scores[g, i] - m)
                scores[g, i] = e
                total += e
            cmax[b, kh, c, g] = m
            csum[b, kh, c, g] = total
        out = acc[b, kh, c]
        out[:] = 0.0
        i = 0
        while i + 4 <= n:
            _load_rows(v_buf, table, row, lo + i, 4, kh, bits4)
            for g in range(G):
                p0, p1, p2, p3 = scores[g, i], scores[g, i + 1], scores[g, i + 2], scores[g, i + 3]
                for d in range(D):
                    out[g, d] += (p0 * rows4[0, d] + p1 * rows4[1, d]) + (p2 * rows4[2, d] + p3 * rows4[3, d])
            i += 4
        while i < n:
            _load_rows(v_buf, table, row, lo + i, 1, kh, bits4)
            for g in range(G):
                p0 = scores[g, i]
                for d in range(D):
                    out[g, d] += p0 * rows4[0, d]
            i += 1

    @numba.njit(fastmath=True, cache=True)
    def _merge(b, kh, chunks, acc, cmax, csum, out, lse_max, lse_sum):
        """Row b's KV head kh: its chunks' partial results merged in chunk order into out[b] (normalised),
        lse_max[b] (score max) and lse_sum[b] (sum of exp(score - max)), for its G query heads."""
        G, D = acc.shape[3], acc.shape[4]
        for g in range(G):
            h = kh * G + g
            m = cmax[b, kh, 0, g]
            for c in range(1, chunks):
                m = max(m, cmax[b, kh, c, g])
            total = np.float32(0.0)
            for d in range(D):
                out[b, h, d] = 0.0
            for c in range(chunks):
                w = _exp_neg(cmax[b, kh, c, g] - m)
                total += w * csum[b, kh, c, g]
                for d in range(D):
                    out[b, h, d] += w * acc[b, kh, c, g, d]
            inv = np.float32(1.0) / total
            for d in range(D):
                out[b, h, d] *= inv
            lse_max[b, h] = m
            lse_sum[b, h] = total

    @numba.njit(cache=True)
    def _plan(rows, seq_lens, start, Hk):
        """The jobs of a call: per row its chunk count, and the (row, KV head, chunk) of every job. Rows of one
        request (a decode row and its draft rows, adjacent, with the same req_to_token row) take each (KV head,
        chunk) one after another, so the later ones find its keys and values in cache (prange gives each thread
        a contiguous run of jobs)."""
        B = seq_lens.shape[0]
        chunks = np.empty(B, np.int64)
        for b in range(B):
            chunks[b] = (seq_lens[b] - start + CHUNK - 1) // CHUNK
        jobs = np.empty((int(chunks.sum()) * Hk, 3), np.int64)
        j = 0
        b0 = 0
        while b0 < B:
            b1 = b0 + 1
            while b1 < B and rows[b1] == rows[b0]:
                b1 += 1
            for kh in range(Hk):
                for c in range(chunks[b0:b1].max()):
                    for b in range(b0, b1):
                        if c < chunks[b]:
                            jobs[j, 0], jobs[j, 1], jobs[j, 2] = b, kh, c
                            j += 1
            b0 = b1
        return chunks, jobs

    # q, out: [B, Hq, D] float32; k_buf, v_buf: [S, Hkv, D] int32 (float32 bits) or int16 (bf16 bits);
    # lse_max, lse_sum: [B, Hq] float32, each head's score max and sum of exp(score - max) over its columns.
    # Two entry points (distinct names, so numba's on-disk cache keeps both).
    @numba.njit(cache=True)
    def _scratch(q, k_buf, rows, seq_lens, start):
        """_plan's chunk counts and jobs, and the chunks' partial results: acc [B, Hk, chunks, G, D], cmax and
        csum [B, Hk, chunks, G]."""
        B, Hk, D = q.shape[0], k_buf.shape[1], q.shape[2]
        chunks, jobs = _plan(rows, seq_lens, start, Hk)
        acc = np.empty((B, Hk, chunks.max(), q.shape[1] // Hk, D), np.float32)
        return chunks, jobs, acc, np.empty(acc.shape[:4], np.float32), np.empty(acc.shape[:4], np.float32)

    @numba.njit(fastmath=True, cache=True)
    def _decode_serial(q, k_buf, v_buf, table, rows, seq_lens, start, scale, softcap, out, lse_max, lse_sum):
        chunks, jobs, acc, cmax, csum = _scratch(q, k_buf, rows, seq_lens, start)
        for j in range(jobs.shape[0]):
            _job(jobs[j, 0], jobs[j, 1], jobs[j, 2], q, k_buf, v_buf, table, rows, seq_lens, start, scale, softcap,
                 acc, cmax, csum)
        Hk = k_buf.shape[1]
        for j in range(q.shape[0] * Hk):
            _merge(j // Hk, j % Hk, chunks[j // Hk], acc, cmax, csum, out, lse_max, lse_sum)

    @numba.njit(parallel=True, fastmath=True, cache=True)
    def _decode_parallel(q, k_buf, v_buf, table, rows, seq_lens, start, scale, softcap, out, lse_max, lse_sum):
        chunks, jobs, acc, cmax, csum = _scratch(q, k_buf, rows, seq_lens, start)
        for j in numba.prange(jobs.shape[0]):
            _job(jobs[j, 0], jobs[j, 1], jobs[j, 2], q, k_buf, v_buf, table, rows, seq_lens, start, scale, softcap,
                 acc, cmax, csum)
        Hk = k_buf.shape[1]
        for j in numba.prange(q.shape[0] * Hk):
            _merge(j // Hk, j % Hk, chunks[j // Hk], acc, cmax, csum, out, lse_max, lse_sum)


def warm_up() -> None:
    """Builds (or loads) the C kernel and compiles its numba caller with one call on a tiny input, so that a
    runtime's first decode step does not pay for either."""
    native = native_kernel()
    if native is not None:
        q = np.zeros((1, 1, 16), np.float32)
        bits = np.zeros((1, 1, 16), np.int16)
        arrays = (np.empty_like(q), np.empty((1, 1), np.float32), np.empty((1, 1), np.float32))
        native(q, bits, bits, _NO_SCALES, _NO_SCALES, _NO_ROTATION, np.int32(0), np.zeros((1, 1), np.int32),
               np.zeros(1, np.int64), np.ones(1, np.int64), np.int64(0), np.float32(1.0), np.float32(0.0), *arrays,
               np.int32(1))


def parallel_worth_it(seq_lens: np.ndarray, start: int, kv_heads: int) -> bool:
    """Whether a call over these rows has enough work for numba's threads (the answer is the same bits
    either way)."""
    return (int(seq_lens.sum()) - start * len(seq_lens)) * kv_heads >= PARALLEL_MIN_WORK


QUANT_CODES = {np.dtype(np.int8): 1, np.dtype(np.uint8): 2}    # cache bits dtype -> the C kernel's `quant`
_NO_SCALES = np.zeros((1, 1), np.int16)      # bfloat16 bits, unread without quantization
_NO_ROTATION = np.zeros((1, 1), np.float32)  # a [1, 1] rotation: none (the kernel gets NULL)


def cache_bits(cache: torch.Tensor) -> np.ndarray:
    """One layer's K or V buffer [S, Hkv, D] as the kernel reads it: its float32 (int32) or bfloat16 (int16)
    bits, or a quantized pool's bytes (int8 values: int8; float8 e4m3: uint8), a view of the same memory (so
    later writes to the pool are seen)."""
    views = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.int8: torch.int8,
             torch.float8_e4m3fn: torch.uint8}
    if cache.dtype not in views:
        raise TypeError(f"decode_attention_cpu takes a float32, bfloat16, int8 or float8_e4m3fn cache, got "
                        f"{cache.dtype}")
    return cache.view(views[cache.dtype]).numpy()


def quantized_supported() -> bool:
    """Whether the paged kernel reads int8 / float8 caches here (the C kernel only: the numba one does not)."""
    return native_kernel() is not None


def decode_attention_arrays(q: np.ndarray, k_bits: np.ndarray, v_bits: np.ndarray, req_to_token: np.ndarray,
                            req_pool_indices: np.ndarray, seq_lens: np.ndarray, scale: float, start: int = 0,
                            parallel: bool | None = None, softcap: float | None = None,
                            scales: tuple[np.ndarray, np.ndarray] | None = None, rotation: np.ndarray | None = None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unchecked kernel call over numpy arrays: q [B, Hq, D] float32 contiguous, k/v bits from
    cache_bits(); attends over columns start..seq_lens[b]-1 (each request must have one). Returns
    (out [B, Hq, D] float32, normalised over those columns; score max [B, Hq]; sum of exp(score - max)
    [B, Hq]), the last two to merge with attention over columns :start computed elsewhere (`softcap`: scores
    capped as softcap * tanh(score / softcap); the two parts then merge only if both were capped). For callers that
    checked their layout once (the attention backend); everyone else calls decode_attention_cpu.

    `parallel` picks the entry point (None: by job count). Both call the one compiled `_job`, so a query row's
    result is the same bits from either (inlined into each, fastmath reassociated them differently, and a
    request's greedy output depended on how many others shared its pass)."""
    # the kernels read int64 rows and lengths, an int32 table and float32 queries, each contiguous (no copy when so)
    q = np.ascontiguousarray(q, np.float32)
    req_to_token = np.ascontiguousarray(req_to_token, np.int32)
    req_pool_indices = np.ascontiguousarray(req_pool_indices, np.int64)
    seq_lens = np.ascontiguousarray(seq_lens, np.int64)
    B, Hq, _ = q.shape
    out = (np.empty(q.shape, np.float32), np.empty((B, Hq), np.float32), np.empty((B, Hq), np.float32))
    if B:
        if parallel is None:
            parallel = parallel_worth_it(seq_lens, start, k_bits.shape[1]) and match_torch_threads() > 1
        decode_attention_into(q, k_bits, v_bits, req_to_token, req_pool_indices, seq_lens, scale, out, parallel,
                              start, softcap, scales, rotation)
    return out


def decode_attention_into(q: np.ndarray, k_bits: np.ndarray, v_bits: np.ndarray, req_to_token: np.ndarray,
                          req_pool_indices: np.ndarray, seq_lens: np.ndarray, scale: float,
                          out: tuple[np.ndarray, np.ndarray, np.ndarray], parallel: bool,
                          start: int = 0, softcap: float | None = None,
                          scales: tuple[np.ndarray, np.ndarray] | None = None,
                          rotation: np.ndarray | None = None) -> np.ndarray:
    """decode_attention_arrays into caller-owned arrays `out` = (out [B, Hq, D] float32, score max [B, Hq], sum
    of exp [B, Hq]), B >= 1, for a caller that makes them once per pass and calls once per layer (the
    allocations cost about what the kernel's arithmetic does on a short context). Returns out[0]. A quantized
    cache (int8 / uint8 bits) comes with `scales` = (k_scale, v_scale), each [S, Hkv] bfloat16 bits (int16), and
    `rotation` [D, D] float32, the rotation its vectors are stored under (q and the output are turned by it in
    the kernel; C kernel only)."""
    native = native_kernel()
    cap = np.float32(softcap or 0.0)
    quant = QUANT_CODES.get(k_bits.dtype, 0)
    if (quant or rotation is not None) and (native is None or q.shape[2] % 16 or q.shape[2] > MAX_NATIVE_HEAD_DIM
                                            or (quant and scales is None)):
        raise TypeError("a quantized KV cache needs the C decode kernel (head dims a multiple of 16 up to "
                        f"{MAX_NATIVE_HEAD_DIM}) and its scales")
    if native is not None and q.shape[2] % 16 == 0 and q.shape[2] <= MAX_NATIVE_HEAD_DIM:
        threads = torch.get_num_threads() if parallel else 1    # the C kernel takes its count per call
        ks, vs = scales if quant else (_NO_SCALES, _NO_SCALES)
        rot = _NO_ROTATION if rotation is None else np.ascontiguousarray(rotation, np.float32)
        if native(q, k_bits, v_bits, ks, vs, rot, np.int32(quant), req_to_token, req_pool_indices, seq_lens,
                  np.int64(start), np.float32(scale), cap, out[0], out[1], out[2], np.int32(threads)) != 0:
            raise MemoryError(f"decode attention: out of memory for {q.shape[0]} query rows")
        return out[0]
    kernel = _decode_parallel if parallel else _decode_serial
    kernel(q, k_bits, v_bits, req_to_token, req_pool_indices, seq_lens, np.int64(start), np.float32(scale), cap,
           out[0], out[1], out[2])
    return out[0]


def shared_prefix_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            prefix_slots: torch.Tensor, scale: float) -> tuple[torch.Tensor, ...]:
    """Cascade part one: every request's query over the same `prefix_slots` [P] (a cached prefix they all
    share), each K/V row read once for all of them: per KV head, the B * G queries of its group against the P
    keys, by torch's CPU flash-attention kernel (which returns each query's log-sum-exp), or by two GEMMs where
    torch lacks it. The flash kernel's tiled exp runs ~1.8x faster than the GEMMs' eager softmax (B 20, P 700: 257
    against 461 us a layer). q: [B, Hq, D]. Returns float32 (out [B, Hq, D] normalised, score max [B, Hq], sum of
    exp [B, Hq]), as merge_attention takes them (with the flash kernel: the log-sum-exp, and ones)."""
    B, Hq, D = q.shape
    Hk = k_cache.shape[1]
    G = Hq // Hk
    keys = k_cache.index_select(0, prefix_slots).float().transpose(0, 1)            # [Hk, P, D]
    values = v_cache.index_select(0, prefix_slots).float().transpose(0, 1)          # [Hk, P, D]
    qh = q.float().view(B, Hk, G, D).transpose(0, 1).reshape(Hk, B * G, D)          # [Hk, B*G, D]

    def per_request(t: torch.Tensor) -> torch.Tensor:                              # [Hk, B*G, X] -> [B, Hq, X]
        return t.reshape(Hk, B, G, -1).transpose(0, 1).reshape(B, Hq, -1)

    flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if flash is not None:
        out, lse = flash(qh[None], keys[None].contiguous(), values[None].contiguous(), 0.0, False, scale=scale)[:2]
        lse = per_request(lse[0][..., None])[..., 0]                                 # [B, Hq]
        return per_request(out[0]), lse, torch.ones_like(lse)
    scores = torch.matmul(qh, keys.transpose(1, 2)) * scale                        # [Hk, B*G, P]
    m = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - m)
    total = e.sum(-1, keepdim=True)
    out = torch.matmul(e, values) / total                                           # [Hk, B*G, D]
    return per_request(out), per_request(m)[..., 0], per_request(total)[..., 0]


def merge_attention(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Attention over two disjoint column sets, each given as (out normalised, score max, sum of exp)."""
    out_a, max_a, sum_a = a
    out_b, max_b, sum_b = b
    m = torch.maximum(max_a, max_b)
    wa, wb = sum_a * torch.exp(max_a - m), sum_b * torch.exp(max_b - m)             # [B, Hq]
    return (out_a * wa[..., None] + out_b * wb[..., None]) / (wa + wb)[..., None]


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k_bits: np.ndarray,
                           v_bits: np.ndarray, req_to_token: np.ndarray, req_pool_indices: np.ndarray,
                           seq_lens: np.ndarray, scale: float, prefix_slots: torch.Tensor | None = None,
                           parallel: bool | None = None, softcap: float | None = None,
                           scales: tuple[np.ndarray, np.ndarray] | None = None,
                           rotation: np.ndarray | None = None) -> torch.Tensor:
    """Unchecked: the kernel over each request's columns after `prefix_slots` (all of them when None), merged
    with the cascade GEMM over `prefix_slots` [P] that every request starts with (not with `softcap`, which the
    cascade does not apply). k/v bits from cache_bits() of k_cache/v_cache; index arrays as in
    decode_attention_arrays. Returns [B, Hq, D] in q's dtype."""
    start = 0 if prefix_slots is None else len(prefix_slots)
    if start and softcap is not None:
        raise ValueError("the shared-prefix cascade does not soft-cap scores; pass prefix_slots=None with softcap")
    if start and scales is not None:
        raise ValueError("the shared-prefix cascade reads an unquantized cache; pass prefix_slots=None")
    parts = decode_attention_arrays(q.float().contiguous().numpy(), k_bits, v_bits, req_to_token,
                                    req_pool_indices, seq_lens, scale, start=start, parallel=parallel,
                                    softcap=softcap, scales=scales, rotation=rotation)
    out = torch.from_numpy(parts[0])
    if start:
        out = merge_attention(shared_prefix_attention(q, k_cache, v_cache, prefix_slots, scale),
                              tuple(torch.from_numpy(p) for p in parts))
    return out.to(q.dtype)


def decode_attention_cpu(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         scale: float, out: torch.Tensor | None = None, shared_prefix: int = 0,
                         window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """Attention of each request's one query over its seq_lens[b] cached tokens (every seq_len >= 1).
    shared_prefix=P > 0 says every request's first P slots are the same (a shared cached prefix, P <
    every seq_len): those columns are attended in one cascade GEMM, the rest by the kernel, then merged.
    window: each query sees only its last `window` columns (read through a table of those columns, see
    window_table). softcap: scores capped as softcap * tanh(score / softcap) (neither takes a shared prefix)."""
    _check(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, window, softcap)
    if shared_prefix and (window is not None or softcap is not None):
        raise ValueError("shared_prefix cannot be combined with window or softcap")
    if q.device.type != "cpu":
        raise ValueError(f"decode_attention_cpu runs on the CPU; q is on {q.device}")
    if shared_prefix and not (0 < shared_prefix < int(seq_lens.min())):
        raise ValueError(f"shared_prefix must be below every seq_len (min {int(seq_lens.min())}), "
                         f"got {shared_prefix}")
    prefix_slots = req_to_token[req_pool_indices[0], :shared_prefix].long() if shared_prefix else None
    table, rows, lens = req_to_token.numpy(), req_pool_indices.numpy(), seq_lens.numpy()
    if window is not None:
        table, rows, lens = window_table(table, rows, lens, window)
    res = paged_decode_attention(q, k_cache, v_cache, cache_bits(k_cache), cache_bits(v_cache), table, rows, lens,
                                 scale, prefix_slots, softcap=softcap)
    if out is not None:
        out.copy_(res)
        return out
    return res


def window_table(req_to_token: np.ndarray, req_pool_indices: np.ndarray, seq_lens: np.ndarray, window: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sliding window as the kernel reads it: (table [B, min(window, max len)] int32 of each entry's last
    `window` slots, rows 0..B-1, their lengths). An entry's columns then start at its first visible one, so its
    result depends on its own columns only, as without a window."""
    seq_lens = np.asarray(seq_lens, np.int64)
    start = np.maximum(seq_lens - window, 0)                                          # [B]
    width = int(min(window, seq_lens.max())) if len(seq_lens) else 1
    cols = np.minimum(start[:, None] + np.arange(width)[None, :], req_to_token.shape[1] - 1)
    table = np.ascontiguousarray(req_to_token[np.asarray(req_pool_indices, np.int64)[:, None], cols], np.int32)
    return table, np.arange(len(seq_lens), dtype=np.int64), seq_lens - start
