"""The W8A8 CPU kernel (C, built on this machine) against its torch reference: this CPU's build and the portable
one, weight blocks of 16 and 32, one and two activation digits, row counts around the kernel's 4-row passes, and
rows that do not depend on the rows beside them."""
import pytest
import torch

from sglite.kernels import w8a8_cpu as k

pytestmark = pytest.mark.skipif(not k.available(), reason=f"w8a8 kernel unavailable: {k.unavailable_reason()}")


def random_weights(N: int, K: int, group: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (N, K), generator=g)
    d = torch.rand(N, K // group, generator=g) * 0.002 + 1e-4
    m = -torch.rand(N, K // group, generator=g) * 0.2
    return q, d, m, g


@pytest.fixture(scope="module", params=["native", "x86-64"])
def lib(request):
    """This CPU's build and the portable one (plain C)."""
    if request.param == "native":
        return k.library()
    lib = k._build(request.param)
    assert lib.w8a8_isa().decode() == "scalar"
    return lib


@pytest.mark.parametrize("M,N,K", [(1, 16, 32), (3, 48, 96), (4, 576, 576), (5, 64, 1536), (9, 32, 64)])
@pytest.mark.parametrize("group", [16, 32])
@pytest.mark.parametrize("digits", [1, 2])
def test_matches_reference(lib, M, N, K, group, digits):
    q, d, m, g = random_weights(N, K, group, M * N + K + group)
    w = k.pack(q, d, m, group)
    assert all(torch.equal(a, b.to(a.dtype)) for a, b in zip(k.unpack(w), (q, d, m)))
    x = (torch.randn(M, K, generator=g) * 3).to(torch.bfloat16)
    if M > 1:
        x[-1, :32] = 0                                     # an all-zero block: scale 0, no division by it
    x[0, -32:] *= 1000                                     # an outlier block
    y = k.w8a8_linear(x, w, digits, lib=lib)
    ref = k.w8a8_linear_ref(x, w, digits).float()
    tol = ref.abs() * 2 ** -7 + 1e-5 * ref.abs().amax(dim=1, keepdim=True)
    assert bool(((y.float() - ref).abs() <= tol).all())
    # and close to the float32 matmul of the weights (the activation rounding is the only loss)
    wf = (q.double().view(N, K // group, group) * d.double()[..., None] + m.double()[..., None]).view(N, K)
    exact = x.double() @ wf.T
    rel = float((y.double() - exact).norm() / exact.norm())
    assert rel < (0.02 if digits == 1 else 0.004), rel


@pytest.mark.parametrize("group", [16, 32])
@pytest.mark.parametrize("digits", [1, 2])
def test_a_row_does_not_depend_on_its_batch(lib, group, digits):
    """M=1 rows equal the same rows inside a call of 37 (every position of the 4-row passes)."""
    q, d, m, g = random_weights(64, 576, group, 7)
    w = k.pack(q, d, m, group)
    x = torch.randn(37, 576, generator=g).to(torch.bfloat16)
    full = k.w8a8_linear(x, w, digits, lib=lib)
    for i in range(37):
        assert torch.equal(k.w8a8_linear(x[i:i + 1].contiguous(), w, digits, lib=lib), full[i:i + 1])
    assert torch.equal(k.w8a8_linear(x[5:11].contiguous(), w, digits, lib=lib), full[5:11])


def test_bad_input_is_refused():
    q, d, m, _ = random_weights(16, 64, 32, 0)
    with pytest.raises(ValueError, match="blocks of"):
        k.pack(q, d, m, 64)
    with pytest.raises(ValueError, match="0..255"):
        k.pack(q + 1, d, m, 32)
    with pytest.raises(ValueError, match="out_features % 16"):
        k.pack(q[:8], d[:8], m[:8], 32)
    w = k.pack(q, d, m, 32)
    with pytest.raises(ValueError, match="bfloat16"):
        k.w8a8_linear(torch.zeros(2, 64), w)
    with pytest.raises(ValueError, match="digits"):
        k.w8a8_linear(torch.zeros(2, 64, dtype=torch.bfloat16), w, 3)
