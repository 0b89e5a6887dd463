"""The output head's refinement kernel (numba) against its torch reference, and RefinedHead with it."""
import pytest
import torch

from sglite.kernels import head_refine_cpu as hr

pytestmark = pytest.mark.skipif(not hr.available(), reason="numba is not installed")


def case(V: int, H: int, T: int, seed: int, ties: bool = False):
    g = torch.Generator().manual_seed(seed)
    w, x = torch.randn(V, H, generator=g), torch.randn(T, H, generator=g)
    approx = (x @ w.T).to(torch.bfloat16)
    if ties:                        # few distinct values: many ties at the k-th largest
        approx = (approx.float() / 4).round().to(torch.bfloat16)
    return approx, w, x


@pytest.mark.parametrize("V,H,k,T,ties", [(512, 64, 64, 2, False), (1000, 32, 64, 3, True), (64 * 70 + 13, 48, 256, 1, False),
                                          (4096, 16, 100, 2, True), (100, 8, 100, 1, False), (200, 8, 7, 1, True)])
def test_refine_head_is_the_reference(V, H, k, T, ties):
    """The same candidates as the torch reference (above the k-th value, then ties by lowest id), their logits the
    float32 dot products, every other entry the widened approximation; vocabularies not a multiple of the kernel's
    block, k above the number of blocks, k = V."""
    approx, w, x = case(V, H, T, V + k, ties)
    out, ref = torch.empty(T, V), torch.empty(T, V)
    assert hr.refine_head(approx, k, w, x, out) is out
    hr.refine_head_ref(approx, k, w, x, ref)
    changed = out != approx.float()
    assert torch.equal(changed, ref != approx.float())
    assert changed.sum(1).tolist() == [k] * T if not ties else (changed.sum(1) <= k).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)     # the dot product's sum in another order
    assert torch.equal(out[~changed], approx.float()[~changed])


def test_refine_head_ties_go_to_the_lowest_ids_and_rows_are_independent():
    V, H = 640, 16
    approx, w, x = case(V, H, 1, 5)
    approx[0] = torch.tensor(-3.0, dtype=torch.bfloat16)
    approx[0, [10, 300, 301, 600]] = torch.tensor(2.0, dtype=torch.bfloat16)    # k = 3: 10, 300, 301
    out = hr.refine_head(approx, 3, w, x, torch.empty(1, V))
    picked = (out[0] != approx[0].float()).nonzero().squeeze(1).tolist()
    exact = (w @ x[0])
    assert all(torch.isclose(out[0, i], exact[i], rtol=1e-5, atol=1e-5) for i in (10, 300, 301))
    assert 600 not in picked
    # a row's result alone equals its result beside others
    two, w2, x2 = case(V, H, 2, 6)
    both = hr.refine_head(two, 64, w2, x2, torch.empty(2, V))
    assert torch.equal(both[1:], hr.refine_head(two[1:], 64, w2, x2[1:], torch.empty(1, V)))


def test_refine_head_refuses_bad_k_and_shapes():
    approx, w, x = case(128, 8, 1, 0)
    with pytest.raises(ValueError, match="k must be"):
        hr.refine_head(approx, 0, w, x, torch.empty(1, 128))
    with pytest.raises(ValueError, match="shapes disagree"):
        hr.refine_head(approx, 4, w[:64], x, torch.empty(1, 128))


def test_refined_head_uses_the_kernel_and_keeps_the_exact_top():
    """RefinedHead over a bf16 approximation: the top candidates' logits are float32's and the argmax is the
    exact one; the torch path (kernel off) agrees on them (the two differ only in which of the tokens tied at the
    k-th approximate value they refine)."""
    from sglite.runtime.linear import RefinedHead, make_linear

    g = torch.Generator().manual_seed(1)
    V, H = 3000, 64
    w, x = torch.randn(V, H, generator=g), torch.randn(4, H, generator=g)
    head = RefinedHead(make_linear(w, None, "bf16"), w)
    assert head._kernel and head.top_k == 64
    exact = x @ w.T
    out = head(x)
    top = exact.topk(8, dim=-1).indices
    torch.testing.assert_close(out.gather(1, top), exact.gather(1, top), rtol=1e-5, atol=1e-5)
    assert torch.equal(out.argmax(-1), exact.argmax(-1))
    head._kernel = False
    torch.testing.assert_close(head(x).gather(1, top), out.gather(1, top), rtol=1e-5, atol=1e-5)
