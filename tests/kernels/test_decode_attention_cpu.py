"""The CPU paged decode kernels (C where it builds, numba) against the torch reference, over GQA ratios, page
layouts, head dims and dtypes; every test runs on each kernel."""
import os
import threading

import numpy as np
import pytest
import torch

from sglite.kernels import decode_attention_cpu as dac
from sglite.kernels.decode_attention import decode_attention_torch
from sglite.kernels.decode_attention_cpu import (CHUNK, PARALLEL_MIN_WORK, cache_bits, decode_attention_arrays,
                                                decode_attention_cpu)


@pytest.fixture(autouse=True, params=["native", "numba"])
def kernel(request, monkeypatch):
    """Runs the test on the C kernel (skipped where it cannot be built) or on the numba one."""
    if request.param == "native":
        if dac.native_kernel() is None:
            pytest.skip(f"the C attention kernel is unavailable here: {dac._NATIVE.why}")
    else:
        monkeypatch.setattr(dac, "_native_kernel", [None])
    return request.param


def test_the_c_kernel_builds_where_a_compiler_is(kernel):
    """Where the C matmul kernel builds (a compiler is there), so must the attention one: a silent fallback to
    numba would cost a third of a decode step on a long context."""
    from sglite.kernels import w4a8_cpu
    if not w4a8_cpu.available():
        pytest.skip(f"no native kernels here: {w4a8_cpu.unavailable_reason()}")
    assert dac._NATIVE.load() is not None, dac._NATIVE.why


@pytest.mark.parametrize("page_size", [0, 1, 16])
@pytest.mark.parametrize("Hq,Hkv,D", [(2, 2, 16), (6, 2, 24), (9, 3, 64), (4, 1, 128)])
def test_matches_reference(paged, Hq, Hkv, D, page_size):
    """D 24 is not a multiple of 16: the C kernel's caller falls back to numba there."""
    k_cache, v_cache, table, rows, seq = paged([1, 17, 70], Hkv, D, page_size, seed=Hq + page_size)
    q = torch.randn(3, Hq, D)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, D ** -0.5)
    out = decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, D ** -0.5)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)   # slot 0 holds NaN: never read


@pytest.mark.parametrize("q_bf16", [True, False])
@pytest.mark.parametrize("Hkv,D", [(1, 32), (3, 48), (2, 64), (1, 80), (1, 128)])
def test_bfloat16_head_dims_match_reference(paged, Hkv, D, q_bf16):
    """bfloat16 pools: the C kernel widens head dims that are multiples of 32 in even/odd order (32, 64, 128),
    others (48, 80) in place; queries that are exactly bfloat16 (the runtime's) take AVX-512 BF16 dot products
    where the CPU has them, others float32 ones."""
    k_cache, v_cache, table, rows, seq = paged([3, 40, 300], Hkv, D, page_size=16, dtype=torch.bfloat16, seed=D)
    q = torch.randn(3, 3 * Hkv, D)          # float32 queries over the bfloat16 pool, as the runtime calls it
    if q_bf16:
        q = q.bfloat16().float()
    ref = decode_attention_torch(q, k_cache.float(), v_cache.float(), table, rows, seq, D ** -0.5)
    out = decode_attention_arrays(q.numpy(), cache_bits(k_cache), cache_bits(v_cache), table.numpy(), rows.numpy(),
                                  seq.numpy(), D ** -0.5)[0]
    torch.testing.assert_close(torch.from_numpy(out), ref, atol=2e-5, rtol=1e-4)


def test_bfloat16_cache_and_out_argument(paged):
    k_cache, v_cache, table, rows, seq = paged([5, 40], 1, 32, page_size=4, dtype=torch.bfloat16)
    q = torch.randn(2, 3, 32).to(torch.bfloat16)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.3)
    out = torch.empty_like(q)
    assert decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, 0.3, out=out) is out
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
def test_long_rows_split_into_chunks_match_reference(paged, dtype, atol):
    """Rows longer than a chunk (split, each chunk a job, merged), one on a chunk boundary, enough work for
    numba's threads; against the reference."""
    lens = [CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17, 5, 2 * CHUNK]
    k_cache, v_cache, table, rows, seq = paged(lens, 3, 64, page_size=16, dtype=dtype, seed=4)
    assert int(seq.sum()) * 3 >= PARALLEL_MIN_WORK
    q = torch.randn(len(lens), 9, 64).to(dtype)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.125)
    out = decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, 0.125)
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, "bf16 queries"])
def test_a_row_is_the_same_bits_whatever_shares_the_call(dtype):
    """A request's draft rows (its own row repeated with seq_len + 1, + 2, ...), other requests' rows, or none:
    each row's result is the bits it has alone, so greedy outputs do not depend on drafts or batch."""
    torch.manual_seed(1)
    q_bf16 = dtype == "bf16 queries"                  # the runtime's: bfloat16 pool, queries exactly bfloat16
    dtype = torch.bfloat16 if q_bf16 else dtype
    S, Hk, D, Hq = 4096, 3, 64, 9
    k_bits = cache_bits(torch.randn(S, Hk, D).to(dtype))
    v_bits = cache_bits(torch.randn(S, Hk, D).to(dtype))
    table = torch.randperm(S).to(torch.int32).view(4, -1).numpy().copy()
    base = [CHUNK - 2, 700, 31]                       # draft rows of the first cross a chunk boundary
    rows = np.array([0, 0, 0, 0, 1, 2], dtype=np.int64)
    seq = np.array([base[0], base[0] + 1, base[0] + 2, base[0] + 3, base[1], base[2]], dtype=np.int64)
    q = torch.randn(len(rows), Hq, D)
    q = (q.bfloat16().float() if q_bf16 else q).numpy()
    together = decode_attention_arrays(q, k_bits, v_bits, table, rows, seq, 0.125)
    for i in range(len(rows)):
        alone = decode_attention_arrays(q[i:i + 1].copy(), k_bits, v_bits, table, rows[i:i + 1], seq[i:i + 1],
                                        0.125, parallel=False)
        for a, b in zip(together, alone):
            assert np.array_equal(a[i], b[0]), i


def test_exp_is_close_to_numpy(kernel):
    if kernel != "numba":
        pytest.skip("the numba kernel's exp (the C one's is checked through the reference comparisons)")
    import numba

    from sglite.kernels.decode_attention_cpu import _exp_neg

    @numba.njit
    def run(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = _exp_neg(x[i])
        return out

    x = -np.concatenate([np.linspace(0, 1, 1001), np.linspace(1, 87, 5001)]).astype(np.float32)
    got, want = run(x), np.exp(x.astype(np.float64))
    err = np.abs(got - want)
    assert err.max() <= 2e-7                                         # against the max score's weight, 1
    assert (err / want <= 3e-7 + 1e-7 * np.abs(x)).all()             # t = x log2(e) rounds in float32
    assert run(np.array([-200.0, -1e30], np.float32)).max() <= 2.0 ** -125   # clamped, not garbage


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_serial_and_parallel_entry_points_agree_bit_for_bit(dtype):
    """A row's attention must not depend on how many requests share the pass (the job count picks the entry
    point), or greedy outputs would depend on batch composition."""
    torch.manual_seed(0)
    S, Hk, D, Hq, B = 4096, 3, 64, 9, 8
    k_bits = cache_bits(torch.randn(S, Hk, D).to(dtype))
    v_bits = cache_bits(torch.randn(S, Hk, D).to(dtype))
    table = torch.randperm(S).to(torch.int32).view(B, -1).numpy().copy()
    q = torch.randn(B, Hq, D).numpy()
    rows, seq = np.arange(B, dtype=np.int64), np.random.default_rng(0).integers(50, S // B, B).astype(np.int64)
    serial = decode_attention_arrays(q, k_bits, v_bits, table, rows, seq, 0.125, parallel=False)
    parallel = decode_attention_arrays(q, k_bits, v_bits, table, rows, seq, 0.125, parallel=True)
    for a, b in zip(serial, parallel):
        assert np.array_equal(a, b)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: numba's default is already 1 thread")
def test_a_thread_runs_the_kernel_on_as_many_threads_as_torch_uses():
    """numba's thread count is per thread: a thread that never set it runs the parallel entry point on every
    core. An engine told to use 1 thread steps on its own loop thread, and its attention ran on 2 (the extra
    worker spinning after each call). The kernel now follows torch's count on the calling thread."""
    import numba
    S, Hk, D, Hq, B = 1024, 3, 64, 9, 8
    k_bits = cache_bits(torch.randn(S, Hk, D))
    table = torch.randperm(S).to(torch.int32).view(B, -1).numpy().copy()
    q = torch.randn(B, Hq, D).numpy()
    rows, seq = np.arange(B, dtype=np.int64), np.full(B, 100, dtype=np.int64)
    assert (int(seq.sum()) * Hk) >= PARALLEL_MIN_WORK
    seen = {}

    def call():
        decode_attention_arrays(q, k_bits, k_bits, table, rows, seq, 0.125)
        seen["numba"] = numba.get_num_threads()

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t = threading.Thread(target=call)
        t.start()
        t.join()
    finally:
        torch.set_num_threads(before)
    assert seen["numba"] == 1


def test_bad_inputs_are_named():
    k = torch.zeros(8, 2, 16)
    table = torch.zeros(2, 8, dtype=torch.int32)
    with pytest.raises(TypeError, match="float32, bfloat16, int8 or float8_e4m3fn cache, got torch.float16"):
        decode_attention_cpu(torch.zeros(1, 2, 16, dtype=torch.float16), k.half(), k.half(), table,
                             torch.tensor([0]), torch.tensor([1]), 1.0)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        decode_attention_cpu(torch.zeros(1, 3, 16), k, k, table, torch.tensor([0]), torch.tensor([1]), 1.0)


@pytest.mark.parametrize("prefix_path", ["flash", "gemm"])
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
def test_shared_prefix_cascade_matches_reference(dtype, atol, prefix_path, monkeypatch):
    """Requests sharing their first P slots (a cached prefix): prefix by torch's CPU flash kernel (or the GEMMs
    where torch lacks it), suffixes by the kernel, merged."""
    if prefix_path == "gemm":
        monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None, raising=False)
    g = torch.Generator().manual_seed(3)
    B, Hk, G, D, P = 5, 3, 3, 64, 40
    k_cache = torch.randn(400, Hk, D, generator=g).to(dtype)
    v_cache = torch.randn(400, Hk, D, generator=g).to(dtype)
    k_cache[0] = v_cache[0] = float("nan")
    seq = torch.tensor([41, 45, 60, 90, 52])
    table = torch.zeros(B + 1, 100, dtype=torch.int32)
    shared = torch.randperm(399, generator=g)[:P] + 1
    free = [s for s in (torch.randperm(399, generator=g) + 1).tolist() if s not in set(shared.tolist())]
    for r in range(B):
        n = int(seq[r]) - P
        table[r + 1, :P] = shared
        table[r + 1, P:seq[r]] = torch.tensor(free[:n])
        free = free[n:]
    rows = torch.arange(1, B + 1)
    q = torch.randn(B, Hk * G, D, generator=g).to(dtype)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.125)
    out = decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, 0.125, shared_prefix=P)
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=1e-2)
    with pytest.raises(ValueError, match="below every seq_len"):
        decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, 0.125, shared_prefix=41)


@pytest.mark.parametrize("march", ["haswell", "x86-64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, "int8", "fp8_e4m3"])
def test_c_kernel_builds_for_other_cpus_match_reference(kernel, march, dtype):
    """The C kernel as an AVX2 machine (haswell: two 256-bit registers per vector of 16) and a plain x86-64 one
    (SSE2) build it, against the reference, and a row's bits alone and beside its draft rows; a build this CPU
    cannot run is skipped. One-byte caches (a KVPool's bytes, scales and rotation) against the reference over
    the values they read back as."""
    if kernel != "native":
        pytest.skip("builds the C kernel itself")
    from sglite.kernels.native import cpu_flags_line
    if march == "haswell" and "avx2" not in cpu_flags_line().split():
        pytest.skip("this CPU has no AVX2")
    lib = dac._NATIVE.build(march)
    g = torch.Generator().manual_seed(7)
    S, Hk, D, Hq = 2048, 3, 64, 9
    k_cache = torch.randn(S, Hk, D, generator=g)
    v_cache = torch.randn(S, Hk, D, generator=g)
    if isinstance(dtype, str):
        from sglite.runtime.kv_pool import KVPool
        pool = KVPool(1, S, Hk, D, torch.float32, kv_cache_dtype=dtype)
        pool.store(0, torch.arange(S), k_cache, v_cache)
        k_cache, v_cache = pool.k_buffer[0], pool.v_buffer[0]
        scales = [cache_bits(pool.k_scale[0]), cache_bits(pool.v_scale[0])]
        rot, quant = pool.key_rotation.numpy(), dac.QUANT_CODES[cache_bits(k_cache).dtype]
        k_ref, v_ref = (x.float() for x in pool.layer(0))
    else:
        k_cache, v_cache = k_cache.to(dtype), v_cache.to(dtype)
        scales, rot, quant = [np.zeros(1, np.int16)] * 2, None, 0
        k_ref, v_ref = k_cache.float(), v_cache.float()
    table = torch.randperm(S, generator=g).to(torch.int32).view(4, -1).contiguous()
    rows = torch.tensor([0, 0, 0, 2, 3])
    seq = torch.tensor([300, 301, 302, 17, 512])
    q = torch.randn(5, Hq, D, generator=g).bfloat16().float()     # bf16-exact queries, as the runtime's

    def call(idx):
        qq = q[idx].contiguous().numpy()
        out = (np.empty_like(qq), np.empty(qq.shape[:2], np.float32), np.empty(qq.shape[:2], np.float32))
        r, s = rows[idx].numpy().copy(), seq[idx].numpy().copy()
        kb, vb, tb = cache_bits(k_cache), cache_bits(v_cache), table.numpy()
        assert lib.attn_decode(qq.ctypes.data, kb.ctypes.data, vb.ctypes.data, scales[0].ctypes.data,
                               scales[1].ctypes.data, None if rot is None else rot.ctypes.data, kb.itemsize, quant,
                               tb.ctypes.data, tb.shape[1], r.ctypes.data, s.ctypes.data, len(r), Hq, Hk, D, 0,
                               0.125, 0.0, out[0].ctypes.data, out[1].ctypes.data, out[2].ctypes.data, 2) == 0
        return out[0]

    together = call(list(range(5)))
    ref = decode_attention_torch(q, k_ref, v_ref, table, rows, seq, 0.125)
    torch.testing.assert_close(torch.from_numpy(together), ref, atol=2e-5, rtol=1e-4)
    for i in range(5):
        assert np.array_equal(call([i])[0], together[i]), i


def test_int32_indices_and_a_sliced_table_are_taken(paged):
    """The C kernel reads int64 rows and lengths and a contiguous int32 table: other index dtypes and a table
    that is a column slice are converted, not misread."""
    k_cache, v_cache, table, rows, seq = paged([5, 40, 90], 3, 64, page_size=16, seed=11)
    wide = torch.zeros(table.shape[0], table.shape[1] + 7, dtype=torch.int32)
    wide[:, :table.shape[1]] = table
    sliced = wide[:, :table.shape[1]]
    assert not sliced.is_contiguous()
    q = torch.randn(3, 9, 64)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.125)
    out = decode_attention_cpu(q, k_cache, v_cache, sliced, rows.to(torch.int32), seq.to(torch.int32), 0.125)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_a_long_run_of_one_request_is_split_and_keeps_its_bits(kernel):
    """150 rows of one request (past the C kernel's 64 rows a run): every row as alone, against the reference."""
    g = torch.Generator().manual_seed(5)
    S, Hk, D, Hq = 1024, 3, 64, 9
    k_cache = torch.randn(S, Hk, D, generator=g).bfloat16()
    v_cache = torch.randn(S, Hk, D, generator=g).bfloat16()
    table = torch.randperm(S, generator=g).to(torch.int32).view(1, -1).contiguous()
    n = 150
    rows, seq = torch.zeros(n, dtype=torch.int64), torch.arange(300, 300 + n)
    q = torch.randn(n, Hq, D, generator=g).bfloat16().float()
    kb, vb = cache_bits(k_cache), cache_bits(v_cache)
    together = decode_attention_arrays(q.numpy(), kb, vb, table.numpy(), rows.numpy(), seq.numpy(), 0.125)[0]
    ref = decode_attention_torch(q, k_cache.float(), v_cache.float(), table, rows, seq, 0.125)
    torch.testing.assert_close(torch.from_numpy(together), ref, atol=2e-5, rtol=1e-4)
    for i in (0, 63, 64, 65, 149):
        alone = decode_attention_arrays(q[i:i + 1].numpy(), kb, vb, table.numpy(), rows[i:i + 1].numpy(),
                                        seq[i:i + 1].numpy(), 0.125, parallel=False)[0]
        assert np.array_equal(alone[0], together[i]), i


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("window,softcap", [(None, 2.0), (7, None), (300, 1.5), (1000, None)])
def test_window_and_softcap_match_reference(paged, dtype, atol, window, softcap):
    """Rows longer than a chunk, a window inside one chunk and one across chunks; D 256 as Gemma's."""
    k_cache, v_cache, table, rows, seq = paged([1, 17, 300, 600], 1, 256, 16, dtype=dtype, seed=3)
    q = (torch.randn(4, 4, 256) * 2).to(dtype)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 256 ** -0.5, window=window, softcap=softcap)
    out = decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, 256 ** -0.5, window=window, softcap=softcap)
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=1e-2)


def test_a_windowed_row_is_the_same_bits_whatever_shares_the_call(paged):
    k_cache, v_cache, table, rows, seq = paged([40, 300, 600], 2, 64, 16, seed=5)
    q = torch.randn(3, 4, 64)
    together = decode_attention_cpu(q, k_cache, v_cache, table, rows, seq, 0.125, window=100, softcap=3.0)
    for b in range(3):
        alone = decode_attention_cpu(q[b:b + 1], k_cache, v_cache, table, rows[b:b + 1], seq[b:b + 1], 0.125,
                                     window=100, softcap=3.0)
        assert torch.equal(alone[0], together[b])


def test_shared_prefix_with_window_or_softcap_is_refused(paged):
    k_cache, v_cache, table, rows, seq = paged([20, 20], 1, 16, 0)
    with pytest.raises(ValueError, match="shared_prefix cannot be combined"):
        decode_attention_cpu(torch.randn(2, 1, 16), k_cache, v_cache, table, rows, seq, 0.25, shared_prefix=4,
                             window=8)
