"""The W4A8 CPU kernel (C, built on this machine) against its torch reference: this CPU's build, the AVX2 one and
the portable one, one and two activation digits, row counts around the kernel's 4-row passes, and rows that do
not depend on the rows beside them."""
import pytest
import torch

from sglite.kernels import w4a8_cpu as k
from sglite.kernels.native import cpu_flags_line

pytestmark = pytest.mark.skipif(not k.available(), reason=f"w4a8 kernel unavailable: {k.unavailable_reason()}")


def random_weights(N: int, K: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (N, K), generator=g)
    d = torch.rand(N, K // 32, generator=g) * 0.02 + 1e-3
    m = -torch.rand(N, K // 32, generator=g) * 0.1
    return q, d, m, g


@pytest.fixture(scope="module", params=["native", "haswell", "x86-64"])
def lib(request):
    """This CPU's build, the AVX2 one (haswell: AVX2, FMA, F16C, no AVX-512) and the portable one; a build
    this CPU cannot run is skipped."""
    if request.param == "native":
        return k.library()
    lib = k._build(request.param)
    wanted = {"haswell": "avx2", "x86-64": "scalar"}[request.param]
    assert lib.w4a8_isa().decode() == wanted
    if wanted == "avx2" and "avx2" not in cpu_flags_line().split():
        pytest.skip("this CPU has no AVX2")
    return lib


@pytest.mark.parametrize("M,N,K", [(1, 16, 32), (3, 48, 96), (4, 576, 576), (5, 64, 1536), (9, 32, 64)])
@pytest.mark.parametrize("digits", [1, 2])
def test_matches_reference(lib, M, N, K, digits):
    q, d, m, g = random_weights(N, K, M * N + K)
    w = k.pack(q, d, m)
    x = (torch.randn(M, K, generator=g) * 3).to(torch.bfloat16)
    if M > 1:
        x[-1, :32] = 0                                     # an all-zero block: scale 0, no division by it
    x[0, -32:] *= 1000                                     # an outlier block
    y = k.w4a8_linear(x, w, digits, lib=lib)
    ref = k.w4a8_linear_ref(x, w, digits).float()
    # float32 sums in another order than the reference's float64, then bf16 rounding: one bf16 step, plus
    # float32 cancellation in rows whose terms are far larger than their sum
    tol = ref.abs() * 2 ** -7 + 1e-5 * ref.abs().amax(dim=1, keepdim=True)
    assert bool(((y.float() - ref).abs() <= tol).all())
    # and close to the float32 matmul of the dequantized weights (the activation rounding is the only loss)
    wf = (q.float().view(N, K // 32, 32) * d.half().float()[..., None] + m.half().float()[..., None]).view(N, K)
    exact = x.float() @ wf.T
    rel = float((y.float() - exact).norm() / exact.norm())
    assert rel < (0.02 if digits == 1 else 0.004), rel


@pytest.mark.parametrize("digits", [1, 2])
def test_a_row_does_not_depend_on_its_batch(lib, digits):
    q, d, m, g = random_weights(64, 576, 7)
    w = k.pack(q, d, m)
    x = torch.randn(11, 576, generator=g).to(torch.bfloat16)
    whole = k.w4a8_linear(x, w, digits, lib=lib)
    for i in range(11):
        assert torch.equal(k.w4a8_linear(x[i:i + 1].contiguous(), w, digits, lib=lib), whole[i:i + 1])
    assert torch.equal(k.w4a8_linear(x[3:9].contiguous(), w, digits, lib=lib), whole[3:9])


def test_pack_round_trips_and_checks_shapes():
    q, d, m, _ = random_weights(32, 96, 1)
    w = k.pack(q, d, m)
    q2, d2, m2 = k.unpack(w)
    assert torch.equal(q2.long(), q) and torch.equal(d2, d.half()) and torch.equal(m2, m.half())
    with pytest.raises(ValueError, match="out_features % 16"):
        k.pack(q[:8], d[:8], m[:8])
    with pytest.raises(ValueError, match="must be"):
        k.pack(q, d[:, :2], m)


def test_bad_inputs_are_refused_by_name():
    q, d, m, _ = random_weights(16, 64, 2)
    w = k.pack(q, d, m)
    with pytest.raises(ValueError, match="bfloat16"):
        k.w4a8_linear(torch.randn(2, 64), w)
    with pytest.raises(ValueError, match=r"\[M, 64\]"):
        k.w4a8_linear(torch.randn(2, 32).bfloat16(), w)
    with pytest.raises(ValueError, match="digits"):
        k.w4a8_linear(torch.randn(2, 64).bfloat16(), w, digits=3)


def test_w4a16_linear_in_a_model_format():
    """The runtime's 'w4a16' format runs this kernel with two digits; shapes the 4-bit kernels cannot take
    become int8."""
    from sglite.runtime.linear import Int8Linear, W4A8Linear, make_linear

    q = torch.randint(0, 16, (48, 64))
    q[:, 0::32], q[:, 1::32] = 0, 15
    layer = make_linear(q * 0.01 - 0.08, None, "w4a16")
    assert isinstance(layer, W4A8Linear) and layer.digits == 2
    x = torch.randn(3, 64).bfloat16()
    assert torch.equal(layer(x), k.w4a8_linear(x, layer.weights, 2))
    assert isinstance(make_linear((q * 0.01 - 0.08)[:40], None, "w4a16"), Int8Linear)   # 40 rows: not % 16


@pytest.mark.parametrize("fmt", ["bf16", "int8", "int4", "w4a16", "w4a16+int4"])
def test_linears_write_into_a_given_output_as_they_return_one(fmt):
    """`out=`: the same bits as without it, written into the buffer (also in row slices of one, as a mixed
    prefill/decode pass of SizedLinear does); the kernel refuses an output it would overrun."""
    from sglite.runtime.linear import SizedLinear, make_sized_linear

    q = torch.randint(0, 16, (48, 64), generator=torch.Generator().manual_seed(1))
    q[:, 0::32], q[:, 1::32] = 0, 15
    w, bias = q * 0.01 - 0.08, torch.randn(48)
    small, _, large = fmt.partition("+")
    layer = make_sized_linear(w, bias, small, large or small)
    x = torch.randn(5, 64).bfloat16()
    for split in ([None, 0, 2, 5] if isinstance(layer, SizedLinear) else [None]):
        want = layer(x, split)
        out = torch.full((5, 48), 3.0, dtype=torch.bfloat16)
        assert layer(x, split, out=out) is out and torch.equal(out, want)
    if fmt == "w4a16":
        with pytest.raises(ValueError, match="contiguous bfloat16"):
            layer(x, out=torch.empty(48, 5, dtype=torch.bfloat16).t())
        with pytest.raises(ValueError, match="contiguous bfloat16"):
            layer(x, out=torch.empty(4, 48, dtype=torch.bfloat16))


@pytest.mark.parametrize("digits", [1, 2])
def test_symmetric_blocks_store_no_minimum_and_compute_the_same(lib, digits):
    """Blocks whole steps from zero (m = -8 d: Q4_0, the head's ranking grid) pack without m (4.5 bits a weight)
    and give the same outputs, bit for bit, as the same weights with m stored (-8 moves in and out of a rounding
    unchanged); a row alone equals the same row among others."""
    q, d, _, g = random_weights(48, 640, 3)
    d = torch.where(torch.rand(d.shape, generator=g) < 0.5, -d, d)       # Q4_0's d takes either sign
    w = k.pack(q, d, -8 * d)
    assert w.sym and w.wm.numel() == 0 and w.nbytes * 8 / (48 * 640) == 4.5
    q2, d2, m2 = k.unpack(w)
    assert torch.equal(q2, q.to(torch.uint8)) and torch.equal(m2, -8 * d.half())
    stored = k.W4A8Weights(w.qw, w.wd, (-8 * w.wd).contiguous())          # the same weights with m stored
    x = (torch.randn(9, 640, generator=g) * 2).to(torch.bfloat16)
    y = k.w4a8_linear(x, w, digits, lib=lib)
    assert torch.equal(y, k.w4a8_linear(x, stored, digits, lib=lib))
    ref = k.w4a8_linear_ref(x, w, digits).float()
    assert bool(((y.float() - ref).abs() <= ref.abs() * 2 ** -7 + 1e-5 * ref.abs().amax(dim=1, keepdim=True)).all())
    assert all(torch.equal(k.w4a8_linear(x[i:i + 1].contiguous(), w, digits, lib=lib), y[i:i + 1]) for i in range(9))
    assert not k.pack(q, d, -8 * d + 1e-3).sym


@pytest.mark.parametrize("digits", [1, 2])
def test_quantized_activations_are_the_same_on_every_path(lib, digits):
    """Each build's quantization (AVX-512 vectorized, AVX2 and portable C) gives the torch reference's integers and
    float32 scales bit for bit, and the same float32 scaled sums as this CPU's build; blocks of zeros, of one value,
    of halves that round to even, and rows from 1e-6 to 1e6."""
    M, K = 12, 320
    g = torch.Generator().manual_seed(3)
    x = torch.randn(M, K, generator=g) * torch.logspace(-6, 6, M)[:, None]
    x[0, :32] = 0
    x[1, 32:64] = 3.0
    x[2, 64:96] = (torch.randint(-127, 127, (32,), generator=g) + 0.5) / 127 * 2.0
    x[2, 64] = 2.0
    x = x.to(torch.bfloat16)
    a, s, sa = k.quantize_activations(x, digits, lib=lib)
    ref_a, ref_s = k.quantize_activations_ref(x, digits)
    both = a[:, 0].double() * 256 + a[:, 1].double() if digits == 2 else a[:, 0].double()
    assert torch.equal(both.view(M, K // 32, 32), ref_a.double())
    assert torch.equal(s.double(), ref_s[..., 0].float().double())
    assert torch.equal(sa, (s.double() * both.view(M, K // 32, 32).sum(-1)).float())
    assert torch.equal(sa, k.quantize_activations(x, digits)[2])
    assert bool((a[0, :, :32] == 0).all())
    assert bool((a[1, 0, 32:64] == 127).all())
