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


def layout_weights(layout: str, N: int, K: int, seed: int):
    """Weights (q, d, m, group) that pack() must store in `layout`: wide (8 bits, float32 d and m), sym8h (no
    minimum, float16 d: Q8_0), sym8f (no minimum, float32 d per 16: Q6_K's d*sc), sym5h (5 bits around zero, float16
    d: Q5_0, blocks of -16..15 steps and, as a negative d makes them, of -15..16), min5h / min5f (5 bits from a
    minimum: Q5_1's float16 d and m, Q5_K's float32 products)."""
    g = torch.Generator().manual_seed(seed)
    group = 16 if layout in ("sym8f", "sym6f", "sym6i", "sym8i") else 32
    d = torch.rand(N, K // group, generator=g) * 0.002 + 1e-4
    if layout in ("sym8h", "sym5h", "min5h"):
        d = d.half().float()
    if layout in ("sym6i", "sym8i"):
        d = int8_times_half(N, K // group, g)
    if layout == "wide":
        return random_weights(N, K, group, seed)[:3] + (group,)
    if layout in ("sym8h", "sym8f", "sym8i"):
        return torch.randint(1, 256, (N, K), generator=g), d, -128 * d, group
    if layout in ("sym6f", "sym6i"):
        return torch.randint(128 - 32, 128 + 32, (N, K), generator=g), d, -128 * d, group
    if layout == "sym5h":
        steps = torch.randint(-16, 16, (N, K // group, group), generator=g)
        turn = torch.rand(N, K // group, generator=g) < 0.5          # these blocks run -15..16
        steps = torch.where(turn[..., None], -steps, steps)
        return (steps + 128).view(N, K), d, -128 * d, group
    m = -torch.rand(N, K // group, generator=g) * 0.2
    return torch.randint(0, 32, (N, K), generator=g), d, m.half().float() if layout == "min5h" else m, group


def int8_times_half(N: int, blocks: int, g: torch.Generator) -> torch.Tensor:
    """d [N, blocks] as Q6_K writes it: an int8 sc per block of 16 times a float16 D per 16 blocks, the largest |sc|
    of each 16 at -128 (llama.cpp's quantizer) or, in every other row, at 127 (others'), some D negative."""
    sc = torch.randint(-100, 100, (N, blocks // 16, 16), generator=g).float()
    sc[:, :, 3] = torch.where(torch.arange(N)[:, None] % 2 == 0, -128.0, 127.0)
    D = (torch.rand(N, blocks // 16, 1, generator=g) * 2e-5 + 1e-6).half().float()
    D[::3] *= -1
    return (sc * D).view(N, blocks)


LAYOUTS = {"wide": ("8-bit, float32 d and m", 10.0), "sym8h": ("8-bit, float16 d", 8.5),
           "sym8f": ("8-bit, float32 d", 10.0), "sym5h": ("5-bit, float16 d", 5.5),
           "min5h": ("5-bit, float16 d and m", 6.0), "min5f": ("5-bit, float32 d and m", 7.0),
           "sym6f": ("6-bit, float32 d", 8.0), "sym6i": ("6-bit, int8 x float16 d", 6.5625),
           "sym8i": ("8-bit, int8 x float16 d", 8.5625)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("digits", [1, 2])
def test_each_layout_computes_with_the_same_weights(lib, layout, digits):
    """pack() picks the most compact layout that holds the weights exactly (bits a weight as GGUF's Q8_0 8.5,
    Q5_0 5.5, Q6_K 6.5625), unpack() gives back the same weights, and the kernel matches its reference and the
    float matmul."""
    N, K = 48, 768
    q, d, m, group = layout_weights(layout, N, K, 11)
    w = k.pack(q, d, m, group)
    name, bits_per_weight = LAYOUTS[layout]
    assert w.layout == name and w.nbytes * 8 / (N * K) == bits_per_weight

    def weights(q, d, m):
        return (q.double().view(N, -1, group) * d.double()[..., None] + m.double()[..., None]).view(N, K)

    wf = weights(q, d, m)
    assert torch.equal(weights(*k.unpack(w)), wf)
    x = (torch.randn(6, K, generator=torch.Generator().manual_seed(5)) * 2).to(torch.bfloat16)
    x[1, 64:96] = 0
    y = k.w8a8_linear(x, w, digits, lib=lib)
    ref = k.w8a8_linear_ref(x, w, digits).float()
    tol = ref.abs() * 2 ** -7 + 1e-5 * ref.abs().amax(dim=1, keepdim=True)
    assert bool(((y.float() - ref).abs() <= tol).all())
    exact = x.double() @ wf.T
    assert float((y.double() - exact).norm() / exact.norm()) < (0.02 if digits == 1 else 0.004)
    # a row alone equals the same row among others
    assert all(torch.equal(k.w8a8_linear(x[i:i + 1].contiguous(), w, digits, lib=lib), y[i:i + 1]) for i in range(6))


def test_a_weight_off_the_6_bit_window_or_scales_off_int8_keep_the_wider_layout():
    q, d, m, group = layout_weights("sym6i", 16, 512, 3)
    assert k.pack(q, d, m, group).layout == "6-bit, int8 x float16 d"
    q2 = q.clone()
    q2[5, 9] = 128 + 32                                     # one value 32 steps above zero
    assert k.pack(q2, d, m, group).layout == "8-bit, int8 x float16 d"
    d2 = d.clone()
    d2[2, 17] *= 1 + 2 ** -20                               # one block's d no longer an int8 times its D
    assert k.pack(q, d2, -128 * d2, group).layout == "6-bit, float32 d"
    assert torch.equal(k.unpack(k.pack(q, d2, -128 * d2, group))[1], d2)


def test_the_6_bit_layout_equals_the_8_bit_one():
    """Q6_K's weights in the 6-bit layout with int8 scales give the same products as in the 8-bit float32 one
    (d * sc is exact in float32; the integer dot products differ by the zero point, whose sums are exact too)."""
    q, d, m, group = layout_weights("sym6i", 32, 1024, 4)
    six = k.pack(q, d, m, group)
    q8 = q.clone()
    q8[0, 0] = 255                                          # off the 6-bit window: the 8-bit layout
    eight = k.pack(q8, d, m, group)
    assert six.bits == 6 and eight.bits == 8
    x = (torch.randn(5, 1024, generator=torch.Generator().manual_seed(2))).to(torch.bfloat16)
    x[:, 0] = 0                                             # the one weight that differs meets a zero
    for digits in (1, 2):
        a, b = k.w8a8_linear(x, six, digits).float(), k.w8a8_linear(x, eight, digits).float()
        assert bool(((a - b).abs() <= a.abs() * 2 ** -7 + 1e-6).all())


def test_a_weight_off_the_5_bit_window_keeps_8_bits():
    q, d, m, group = layout_weights("sym5h", 16, 64, 2)
    q[3, 7] = 128 + 17                                      # one value 17 steps from zero
    assert k.pack(q, d, m, group).bits == 8
    q, d, m, group = layout_weights("min5h", 16, 64, 2)
    q[0, 0] = 32
    assert k.pack(q, d, m, group).bits == 8


def awkward_activations(M: int, K: int, seed: int) -> torch.Tensor:
    """bfloat16 rows with the cases quantization can get wrong: a zero block, a block of one value (every t is
    +-127), halves that round to even (x = (k + 0.5) amax / 127 for some k), tiny and huge magnitudes, -0.0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g) * torch.logspace(-6, 6, M)[:, None]
    x[0, :32] = 0
    x[0, 32:64] = -0.0
    x[1, 32:64] = 3.0
    halves = (torch.randint(-127, 127, (32,), generator=g) + 0.5) / 127
    x[2, 64:96] = halves * 2.0
    x[2, 64] = 2.0
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("group", [16, 32])
@pytest.mark.parametrize("digits", [1, 2])
def test_quantized_activations_are_the_same_on_every_path(group, digits):
    """This CPU's vectorized quantization and the portable C give the same int8 digits and the same float32 scales
    and scaled sums, bit for bit, and both equal the torch reference's integers and scales."""
    from sglite.kernels.w4a8_cpu import quantize_activations_ref
    M, K = 12, 320
    x = awkward_activations(M, K, 3)
    native = k.quantize_activations(x, group, digits)
    portable = k.quantize_activations(x, group, digits, lib=k._build("x86-64"))
    for u, v in zip(native, portable):
        assert torch.equal(u, v)
    a, s, sa = native
    ref_a, ref_s = quantize_activations_ref(x, digits)
    both = a[:, 0].double() * 256 + a[:, 1].double() if digits == 2 else a[:, 0].double()
    assert torch.equal(both.view(M, K // 32, 32), ref_a.double())
    assert torch.equal(s.double(), ref_s[..., 0].float().double())
    sums = both.view(M, K // group, group).sum(-1)
    assert torch.equal(sa, (s.repeat_interleave(32 // group, dim=1).double() * sums).float())
    assert bool((a[0, :, :64] == 0).all()) and bool((a[1, 0, 32:64] == 127).all())


@pytest.mark.parametrize("digits", [1, 2])
def test_the_5_bit_layout_gives_the_8_bit_layouts_bits(lib, digits):
    """Blocks of 0..31 with a stored minimum run as the same integers, scales and minima in the 5-bit layout
    (each high nibble's q dotted as 8 q, then shifted back) and in the wide 8-bit one: the same bits out."""
    N, K = 64, 640
    q, d, m, group = layout_weights("min5h", N, K, 7)
    compact = k.pack(q, d, m, group)
    assert compact.bits == 5
    T, ng = N // 16, K // group

    def by_tile(v: torch.Tensor) -> torch.Tensor:
        return v.float().view(T, 16, ng).transpose(1, 2).reshape(N, ng).contiguous()

    qw = q.to(torch.uint8).view(T, 16, K // 4, 4).permute(0, 2, 1, 3).reshape(N, K).contiguous()
    wide = k.W8A8Weights(qw, by_tile(d), by_tile(m), group)
    x = (torch.randn(9, K, generator=torch.Generator().manual_seed(8)) * 3).to(torch.bfloat16)
    assert torch.equal(k.w8a8_linear(x, compact, digits, lib=lib), k.w8a8_linear(x, wide, digits, lib=lib))
