"""GGUF read without the gguf package's reader or a float32 copy: our container parser equals gguf.GGUFReader,
the Q4_K/Q6_K/Q8_0 blocks read straight into integer grids hold the file's exact values, a GridMatrix reads rows
bit-equal to the dequantized matrix (and the head refines from it to the same logits), and a model built from the
lazy tensors computes what one built from the float32 dict computes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sglite.kernels import head_refine_cpu, w8a8_cpu
from sglite.runtime.gguf_blocks import BLOCK, block_grid_from_gguf
from sglite.runtime.gguf_container import GGUFContainer
from sglite.runtime.gguf_loader import GGUFFile
from sglite.runtime.grid_matrix import GridMatrix
from sglite.runtime.linear import StackedLinear, W8A8Linear, make_linear, make_linear_from_grid

from .gguf_blocks import block_tensor, dequantized
from .test_gguf_quants import _write


def test_container_equals_the_gguf_package(tmp_path):
    import gguf

    from sglite.runtime.model_source import default_model_path

    for path in (default_model_path(), tmp_path / "q.gguf"):
        if path.suffix == ".gguf" and not path.exists():
            _write(path, "Q6_K")
        ours, theirs = GGUFContainer(path), gguf.GGUFReader(str(path))
        assert ours.fields == {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
        assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
        for a, b in zip(ours.tensors, theirs.tensors):
            assert a.tensor_type == b.tensor_type and a.shape == tuple(int(x) for x in b.shape)
            assert a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data)


def test_a_truncated_file_is_refused(tmp_path):
    path = tmp_path / "q.gguf"
    _write(path, "Q8_0")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(ValueError, match="runs past the end"):
        GGUFContainer(cut)


@pytest.mark.parametrize("kind", sorted(BLOCK))
def test_block_grids_from_the_bytes_are_the_files_values(kind):
    rows, cols = 48, 512
    raw = block_tensor(kind, rows, cols, seed=5)
    q, scale, lo, bits = block_grid_from_gguf(raw, kind, (rows, cols))
    ref = torch.from_numpy(dequantized(kind, raw).reshape(rows, cols))
    group = cols // scale.shape[1]
    assert q.dtype == torch.uint8 and (bits, group) == {"Q4_K": (4, 32), "Q6_K": (8, 16), "Q8_0": (8, 32)}[kind]
    assert int(q.max()) < 1 << bits
    v = q.view(rows, -1, group).float()
    back = (v - 128) * scale[..., None] if bits == 8 else v * scale[..., None] + lo[..., None]
    assert torch.equal(back.view(rows, cols), ref)
    if bits == 8:
        assert torch.equal(lo, -128 * scale)
    assert block_grid_from_gguf(raw, "Q5_K", (rows, cols)) is None       # read by value instead


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q8_0"])
def test_grid_matrix_rows_and_refined_head_equal_the_float32_matrix(kind):
    V, H = 96, 256
    raw = block_tensor(kind, V, H, seed=7)
    dense = torch.from_numpy(dequantized(kind, raw).reshape(V, H))
    m = GridMatrix.of(block_grid_from_gguf(raw, kind, (V, H)))
    idx = torch.tensor([[3, 95], [0, 3]])
    assert torch.equal(m[idx], dense[idx])
    assert torch.equal(torch.cat([rows for _, rows in m.chunks(40)]), dense)
    assert m.nbytes < dense.numel() * 4 / 2
    if not head_refine_cpu.available():
        pytest.skip("numba is not installed: the torch path reads the same rows")   # pragma: no cover
    x = torch.randn(5, H)
    approx = (x @ dense.T).to(torch.bfloat16)
    a = head_refine_cpu.refine_head(approx, 8, dense, x, torch.empty(5, V))
    b = head_refine_cpu.refine_head(approx, 8, m, x, torch.empty(5, V))
    assert torch.equal(a, b)


def test_stacked_linear_is_its_parts_side_by_side():
    g = torch.Generator().manual_seed(0)
    parts = [make_linear(torch.randn(o, 64, generator=g), None, "fp32") for o in (32, 16, 16)]
    layer = StackedLinear(parts)
    x = torch.randn(3, 64, generator=g)
    want = torch.cat([p(x) for p in parts], dim=-1)
    assert torch.equal(layer(x), want)
    out = torch.empty(3, 64)
    assert layer(x, out=out) is out and torch.equal(out, want)


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q8_0"])
def test_a_model_from_the_lazy_tensors_computes_as_from_the_float32_dict(tmp_path, kind):
    """fp32: the same logits bit for bit (the embedding read from the grid, the rest dequantized per tensor);
    w4a8: the grids read from the bytes give the layers the values block_grid recovers, so the logits agree to
    the kernels' rounding."""
    from sglite.kernels import w4a8_cpu
    from sglite.runtime.model import LlamaModel
    from sglite.runtime.weight_plan import WeightPlan

    path = tmp_path / f"{kind}.gguf"
    _write(path, kind)
    f = GGUFFile(path)
    cfg = f.config()
    ids = torch.tensor([1, 5, 9, 2])
    lazy, eager = f.tensors(), f.load_weights()
    assert set(lazy) == set(eager) and all(torch.equal(lazy[n], eager[n]) for n in eager)
    plans = [WeightPlan("fp32", "fp32")] + ([WeightPlan("w4a8", "w4a8")] if w4a8_cpu.available() else [])
    for plan in plans:
        a, b = LlamaModel(cfg, lazy, plan=plan), LlamaModel(cfg, eager, plan=plan)
        la, lb = _logits(a, ids), _logits(b, ids)
        if plan.small == "fp32":
            assert torch.equal(la, lb)
        else:
            assert torch.allclose(la, lb, atol=0.05 * lb.abs().max().item()), (la - lb).abs().max()


def _logits(net, ids: torch.Tensor) -> torch.Tensor:
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool

    c = net.config
    pool = KVPool(c.num_layers, len(ids) + 1, c.num_kv_heads, c.head_dim, net.dtype, net.device, "auto")
    attn = create_attention_backend(None, pool, net.device)
    table = torch.zeros((1, len(ids)), dtype=torch.int32)
    fb = ForwardBatch.build([ids.tolist()], [0], [0], torch.arange(1, len(ids) + 1), table,
                            logits_indices=torch.arange(len(ids)))
    return net.forward(fb, attn)


@pytest.mark.skipif(w8a8_cpu.isa() != "avx512_vnni", reason="the W8A8 kernel runs Q6_K where it is built with VNNI")
def test_q6_k_from_the_file_runs_at_its_own_6_5625_bits():
    """A Q6_K tensor's grid from its bytes, as llama-quantize writes the scales (each 16's largest |sc| at -128),
    runs in the W8A8 kernel's 6-bit layout with the file's int8 scales and float16 d: the bytes a decode step reads
    are the file's, and the weights are the file's exact values."""
    rows, cols = 64, 1024
    raw = block_tensor("Q6_K", rows, cols, seed=3).reshape(rows, cols // 256, 210)
    raw[:, :, 192 + 5] = np.uint8(128)                      # sc = -128 (int8) in each block's sixth sub-block
    raw = raw.reshape(rows, -1)
    ref = torch.from_numpy(dequantized("Q6_K", raw).reshape(rows, cols))
    grid = block_grid_from_gguf(raw, "Q6_K", (rows, cols))
    layer = make_linear_from_grid(grid, lambda: ref, None, "w4a16")
    assert isinstance(layer, W8A8Linear) and layer.weights.layout == "6-bit, int8 x float16 d"
    assert layer.nbytes == raw.nbytes                       # 210 bytes per 256 weights: 6.5625 bits
    q, d, m = w8a8_cpu.unpack(layer.weights)
    back = (q.double().view(rows, -1, 16) * d.double()[..., None] + m.double()[..., None]).view(rows, cols)
    assert torch.equal(back, ref.double())
    x = torch.randn(3, cols, generator=torch.Generator().manual_seed(0)).bfloat16()
    exact = x.double() @ ref.double().T
    assert float((layer(x).double() - exact).norm() / exact.norm()) < 0.004
