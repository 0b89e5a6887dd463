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
