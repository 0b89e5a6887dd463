"""Kernel tests run twice where they can: on CUDA (compiled) and on the CPU under the Triton interpreter.

TRITON_INTERPRET must be set before a `@triton.jit` decorator runs. Our kernels are built lazily on first use,
so setting it here, at collection time and before any test calls a kernel, is early enough. On a CUDA machine
we leave it unset (the kernels must compile for the GPU) and the interpreter cases are skipped instead.
"""
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton  # noqa: F401
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

_NO_TRITON = "triton is not installed (pip install 'triton==3.7.1')"
INTERPRET = pytest.param("cpu", id="interpret", marks=[
    pytest.mark.interpret,
    pytest.mark.skipif(not HAS_TRITON, reason=_NO_TRITON),
    pytest.mark.skipif(HAS_CUDA, reason="CUDA present: kernels compile for the GPU, the interpreter is not used"),
])
CUDA = pytest.param("cuda", id="cuda", marks=[
    pytest.mark.cuda,
    pytest.mark.skipif(not HAS_TRITON, reason=_NO_TRITON),
    pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU; the same cases run under TRITON_INTERPRET=1 instead"),
])
DEVICES = [INTERPRET, CUDA]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def paged_cache(seq_lens: list[int], num_kv_heads: int, head_dim: int, page_size: int, dtype=torch.float32,
                device="cpu", seed: int = 0):
    """A KV pool layer holding ragged requests on shuffled pages of `page_size` slots (page_size 0: one
    contiguous run). Returns k_cache, v_cache [S, Hkv, D], req_to_token [B + 2, C] int32, req_pool_indices [B]
    (rows out of order), seq_lens [B] int64. Slot 0 stays padding (holds garbage on purpose)."""
    g = torch.Generator().manual_seed(seed)
    B = len(seq_lens)
    if page_size == 0:
        pages = [list(range(1, 1 + sum(seq_lens)))]
        per_req = []
        start = 1
        for n in seq_lens:
            per_req.append(list(range(start, start + n)))
            start += n
        num_slots = start
    else:
        need = [-(-n // page_size) for n in seq_lens]
        order = torch.randperm(sum(need) + 3, generator=g).tolist()  # a few pages stay unused
        per_req, used = [], 0
        for n, k in zip(seq_lens, need):
            slots = [1 + p * page_size + j for p in order[used:used + k] for j in range(page_size)]
            per_req.append(slots[:n])
            used += k
        num_slots = 1 + (sum(need) + 3) * page_size
    k_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    v_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    k_cache[0] = float("nan")  # a kernel that reads padding slot 0 as a key poisons its output
    v_cache[0] = float("nan")
    context = max(seq_lens) + 8
    req_to_token = torch.zeros(B + 2, context, dtype=torch.int32)
    rows = list(range(B + 1, 1, -1))[:B]
    for row, slots in zip(rows, per_req):
        req_to_token[row, :len(slots)] = torch.tensor(slots, dtype=torch.int32)
    to = dict(device=device)
    return (k_cache.to(**to), v_cache.to(**to), req_to_token.to(**to), torch.tensor(rows, **to),
            torch.tensor(seq_lens, dtype=torch.int64, **to))


@pytest.fixture
def paged():
    """The `paged_cache` builder, as a fixture (conftest modules are not importable by name)."""
    return paged_cache


@pytest.fixture
def cpu_interpreter() -> None:
    """For tests that only make sense under the interpreter (CPU tensors through the Triton backend)."""
    if not HAS_TRITON:
        pytest.skip(_NO_TRITON)
    if HAS_CUDA:
        pytest.skip("CUDA present: TRITON_INTERPRET is not set, so Triton cannot run on CPU tensors here")
