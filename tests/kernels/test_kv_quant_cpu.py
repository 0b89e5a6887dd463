"""The CPU quantize-store kernel against its torch reference: exactly the reference's codes and scales where the
rotation is exact (the identity: this checks the int8 rounding and the float8 e4m3 encoding against torch's own
conversion), and within one code where the kernel sums a Hadamard rotation in another order."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sglite.kernels import kv_quant_cpu
from sglite.runtime.kv_pool import rotation

pytestmark = pytest.mark.skipif(not kv_quant_cpu.available(), reason="needs numba")
FORMATS = {"int8": (127.0, torch.int8), "fp8_e4m3": (448.0, torch.float8_e4m3fn)}


def run_kernel(k, v, rot, qmax, storage):
    T, H, D = k.shape
    S = T + 3
    bufs = [np.zeros((S, H, D), np.uint8) for _ in range(2)]
    scales = [np.zeros((S, H), np.int16) for _ in range(2)]
    slots = np.arange(3, 3 + T, dtype=np.int64)
    kv_quant_cpu.quantize_store(k.numpy(), v.numpy(), rot.numpy(), slots, bufs[0], bufs[1], scales[0], scales[1], qmax)
    codes = [torch.from_numpy(b[3:]).view(storage) for b in bufs]
    return codes, [torch.from_numpy(s[3:]).view(torch.bfloat16) for s in scales]


def inputs(T=50, H=3, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(T, H, D, generator=g) * torch.logspace(-4, 3, T)[:, None, None]
    v = torch.randn(T, H, D, generator=g)
    k[0, 0] = 0                                      # a zero head: scale 1, codes 0
    k[1, 1, :5] = torch.tensor([448.0, -448.0, 0.5, 2.0 ** -9, 3 * 2.0 ** -10])   # edges and float8 subnormals
    return k, v


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_identity_rotation_gives_the_reference_exactly(fmt):
    qmax, storage = FORMATS[fmt]
    k, v = inputs()
    eye = torch.eye(64)
    codes, scales = run_kernel(k, v, eye, qmax, storage)
    for x, c, s in zip((k, v), codes, scales):
        ref_c, ref_s = kv_quant_cpu.quantize_ref(x, eye, qmax, storage)
        assert torch.equal(s, ref_s)
        assert torch.equal(c.view(torch.uint8), ref_c.view(torch.uint8))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_hadamard_rotation_within_one_code(fmt):
    qmax, storage = FORMATS[fmt]
    k, v = inputs(seed=1)
    rot = rotation(64)
    codes, scales = run_kernel(k, v, rot, qmax, storage)
    for x, c, s in zip((k, v), codes, scales):
        ref_c, ref_s = kv_quant_cpu.quantize_ref(x, rot, qmax, storage)
        got, ref = c.float() * s.float()[..., None], ref_c.float() * ref_s.float()[..., None]
        step = ref_s.float()[..., None] * (1.0 if fmt == "int8" else 32.0)     # fp8 codes are 1/16 of |y| apart
        assert bool(((got - ref).abs() <= step * 1.0001).all())
        assert float((got != ref).float().mean()) < 0.01
