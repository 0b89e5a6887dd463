"""Batch invariance (EngineConfig.batch_invariant, on by default on the CPU): a request's tokens and logprobs are
the same bits whatever shares its steps, however its prompt is chunked, and whether its prefix comes from the
cache. Checked against the same requests run one at a time, and shown to be a real property: with it off, the
same comparison finds differences (SDPA's prefill and the shared-prefix cascade). The default model with default
settings: tests/runtime/test_batch_invariance_real_model.py."""
from __future__ import annotations

import pytest
import torch

from .conftest import engines_over

SP = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
PREFIX = list(range(100, 260))                                    # shared by every prompt: 160 tokens
PROMPTS = [PREFIX + [500 + i, 900 + 7 * i, 1300 + i] * (3 + i % 4) for i in range(26)]


@pytest.fixture(scope="module")
def bf16_model():
    """The tiny model in bfloat16 (the formats the default model runs in on the CPU; float32 matmuls are not
    row-independent, see the last test), with an untied random head."""
    from sglite.runtime.linear import make_head
    from sglite.runtime.model import LlamaModel, Model
    from sglite.runtime.testing import random_weights, tiny_config
    from sglite.runtime.tokenizer import load_tokenizer

    tok = load_tokenizer()
    cfg = tiny_config(tok.vocab_size)
    net = LlamaModel(cfg, random_weights(cfg, 0), dtype=torch.bfloat16)
    net.head = make_head(torch.randn(net.head.out_features, net.head.in_features,
                                     generator=torch.Generator().manual_seed(1)) * 0.5, "bf16", "bf16")
    return Model(net, tok)


@pytest.fixture
def make_bf16_engine(bf16_model):
    yield from engines_over(bf16_model, chunked_prefill_size=64, max_running_requests=32, max_total_tokens=8192)


def outputs(results) -> list[tuple]:
    return [(tuple(r["output_ids"]), tuple(lp for lp, *_ in r["meta_info"]["output_token_logprobs"]))
            for r in results]


def alone_and_together(make_engine, **options) -> tuple[list[tuple], list[tuple]]:
    """Each prompt by itself (the cache warm from the ones before: its prefix is read, not computed), then all
    in one call on a fresh engine: 26 requests decode together (a shared prefix over 24 requests is where the
    cascade would run), prompts chunked by 64 tokens and prefilled beside other requests' decode rows."""
    e = make_engine(**options)
    alone = outputs([e.generate(input_ids=p, sampling_params=SP, return_logprob=True) for p in PROMPTS])
    together = outputs(make_engine(**options).generate(input_ids=PROMPTS, sampling_params=SP,
                                                       return_logprob=True))
    return alone, together


def test_a_request_comes_out_the_same_alone_and_in_a_batch(make_bf16_engine):
    alone, together = alone_and_together(make_bf16_engine)
    assert make_bf16_engine().get_stats()["batch_invariant"] is True
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a == t, f"prompt {i}"


@pytest.fixture(scope="module")
def windowed_bf16_model(bf16_model):
    """The bf16 tiny model with a sliding window of 48 tokens (shorter than every prompt) on its first layer, the
    second global, each with its own rope base (Gemma 3's layout; the fused CPU layer still runs it)."""
    import dataclasses

    from sglite.runtime.model import LlamaModel, Model
    from sglite.runtime.testing import random_weights

    cfg = dataclasses.replace(bf16_model.config, sliding_window=48, sliding_layers=(True, False))
    net = LlamaModel(cfg, random_weights(cfg, 0), dtype=torch.bfloat16)
    net.head = bf16_model.net.head
    return Model(net, bf16_model.tokenizer)


def test_windowed_layers_keep_the_property(windowed_bf16_model):
    """Prompts longer than the window, chunked by 64 (a chunk's queries see part of their window in the cache),
    cached prefixes, batched decode: each request's bits are its lone run's."""
    engines = engines_over(windowed_bf16_model, chunked_prefill_size=64, max_running_requests=32,
                           max_total_tokens=8192)
    make = next(engines)
    try:
        alone, together = alone_and_together(make)
        assert make().get_stats()["batch_invariant"] is True
        for i, (a, t) in enumerate(zip(alone, together)):
            assert a == t, f"prompt {i}"
    finally:
        next(engines, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window,softcap", [(None, None), (16, None), (None, 5.0), (16, 5.0)])
def test_a_rows_attention_is_the_same_bits_however_the_pass_is_made(dtype, window, softcap):
    """The torch backend with row invariance: a token's attention output (window and soft-cap included) is the
    same bits whether its request's prompt is computed in one pass or in chunks, alone or beside another
    request's rows."""
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool

    g = torch.Generator().manual_seed(0)
    Hq, Hk, D, lens = 4, 2, 16, (70, 45)
    q = [(torch.randn(n, Hq, D, generator=g) * 2).to(dtype) for n in lens]
    k = [torch.randn(n, Hk, D, generator=g).to(dtype) for n in lens]
    v = [torch.randn(n, Hk, D, generator=g).to(dtype) for n in lens]

    def run(steps) -> list[torch.Tensor]:
        """steps: [[(request, start, end), ...], ...] -> each request's [n, Hq, D] outputs."""
        pool = KVPool(1, 256, Hk, D, dtype, "cpu")
        attn = create_attention_backend("torch", pool, "cpu", row_invariant=True)
        assert attn.row_invariant
        table = torch.zeros((2, 128), dtype=torch.int32)
        slots = {0: torch.arange(1, 71), 1: torch.arange(100, 145)}
        out = [torch.empty_like(x) for x in q]
        for step in steps:
            fb = ForwardBatch.build([list(range(e - s)) for _, s, e in step], [s for _, s, _ in step],
                                    [r for r, _, _ in step], torch.cat([slots[r][s:e] for r, s, e in step]), table)
            attn.init_forward_metadata(fb)
            o = attn.forward(torch.cat([q[r][s:e] for r, s, e in step]), torch.cat([k[r][s:e] for r, s, e in step]),
                             torch.cat([v[r][s:e] for r, s, e in step]), 0, fb, 0.3, window=window, softcap=softcap)
            at = 0
            for r, s, e in step:
                out[r][s:e] = o[at:at + e - s]
                at += e - s
        return out

    alone = run([[(0, 0, 70)], [(1, 0, 45)]])
    chunked = run([[(0, 0, 23), (1, 0, 10)], [(0, 23, 64), (1, 10, 11)], [(1, 11, 45), (0, 64, 70)]])
    for r in range(2):
        assert torch.equal(alone[r], chunked[r]), r


def test_without_it_the_same_comparison_finds_differences(make_bf16_engine):
    """The property is not free: SDPA's prefill rows and the cascade's rows depend on the call's shapes."""
    alone, together = alone_and_together(make_bf16_engine, batch_invariant=False)
    assert make_bf16_engine(batch_invariant=False).get_stats()["batch_invariant"] is False
    assert sum(a != t for a, t in zip(alone, together)) > 0


def test_speculation_leaves_a_batch_bit_for_bit_as_it_was(make_bf16_engine):
    """A concurrent batch decoded with drafts gives every request the tokens and the logprob bits it gets without
    (prompts that repeat themselves, so drafts are verified and accepted). On this small model the steps' makeup
    happens to leave prefill alone either way, so this checks verification rather than the property; the main
    job's run_batch, where drafting moved prompts between steps, agreed on 13 of 20 reports before the property
    and 20 of 20 with it (bench/speculative.py)."""
    prompts = [p + [300 + i, 301, 302, 303] * 6 for i, p in enumerate(PROMPTS[:12])]
    sp = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}

    def run(engine):
        out = engine.generate(input_ids=prompts, sampling_params=sp, return_logprob=True)
        return outputs(out), sum(o["meta_info"]["spec_accepted_tokens"] for o in out)

    plain, _ = run(make_bf16_engine())
    drafted, accepted = run(make_bf16_engine(speculative_algorithm="ngram", speculative_row_cost=0.0))
    assert accepted > 0
    for i, (a, b) in enumerate(zip(plain, drafted)):
        assert a == b, f"prompt {i}"


def test_the_claim_follows_the_probe_and_a_dependent_projection_is_named(make_engine, engine_model, monkeypatch):
    """The float32 tiny model: the engine claims the property exactly when every projection's probe allows it
    (torch's float32 matmul took other paths below 12 rows here), and refuses to promise it, naming the
    projection, when one does not."""
    from sglite.runtime import batch_invariance
    from sglite.runtime.batch_invariance import DECODE_MIN_ROWS, leaf_roles, min_independent_rows

    def holds(leaf, decodes):
        rows = min_independent_rows(leaf)
        return rows is not None and (rows <= DECODE_MIN_ROWS or not decodes)

    claim = all(holds(*r) for layer in engine_model.net.linears() for r in leaf_roles(layer))
    assert make_engine().get_stats()["batch_invariant"] is claim
    monkeypatch.setattr(batch_invariance, "min_independent_rows", lambda layer: None if layer.dtype == torch.float32
                        else 1)
    assert make_engine().get_stats()["batch_invariant"] is False
    with pytest.raises(ValueError, match=r"batch_invariant=True cannot hold: the DenseLinear float32 \[\d+ x 64\]"):
        make_engine(batch_invariant=True)


def test_a_prefill_layer_is_padded_to_the_rows_it_needs():
    """A layer of prefill rows whose kernel takes another path below some row count gets calls of at least that
    many rows (its results for the real rows are those of a longer call); a decode layer is never padded."""
    from sglite.runtime.batch_invariance import PaddedRows, leaf_roles, pad_prefill_rows
    from sglite.runtime.linear import DenseLinear, SizedLinear

    g = torch.Generator().manual_seed(0)
    small, large = DenseLinear(torch.randn(32, 64, generator=g).bfloat16()), \
        DenseLinear(torch.randn(32, 64, generator=g).bfloat16())
    sized = SizedLinear(small, large)
    assert leaf_roles(sized) == [(small, True), (large, False)]
    pad_prefill_rows(sized, {id(small): 4, id(large): 4})
    assert sized.small is small and isinstance(sized.large, PaddedRows) and sized.large.inner is large
    wrapped = sized.large
    pad_prefill_rows(sized, {id(large): 4})
    assert sized.large is wrapped                                     # once
    x = torch.randn(6, 64, generator=g).bfloat16()
    for n in (1, 3, 4, 6):
        y = sized(x[:n])
        assert y.shape == (n, 32) and torch.equal(y, large(torch.cat([x[:n], x.new_zeros(max(0, 4 - n), 64)]))[:n])
    out = torch.empty(2, 32, dtype=torch.bfloat16)
    assert sized(x[:2], out=out) is out and torch.equal(out, large(torch.cat([x[:2], x.new_zeros(2, 64)]))[:2])

    # a call longer than the probe compared is made as calls of PROBE_TOTAL rows and one of the rest (padded)
    from sglite.runtime.batch_invariance import PROBE_TOTAL
    calls = []

    class Counting(DenseLinear):
        def __call__(self, x, decode_from=None, out=None):
            calls.append(x.shape[0])
            return super().__call__(x, out=out)

    counting = PaddedRows(Counting(large.weight), 4)
    big = torch.randn(2 * PROBE_TOTAL + 2, 64, generator=g).bfloat16()
    y = counting(big)
    assert calls == [PROBE_TOTAL, PROBE_TOTAL, 4] and y.shape == (2 * PROBE_TOTAL + 2, 32)
    assert torch.equal(y[:PROBE_TOTAL], large(big[:PROBE_TOTAL]))


def test_the_probe_sees_a_kernel_that_changes_path_at_large_calls():
    """The engine's prefill calls are large (a chunk of up to 2048 rows), and torch's matmuls take other paths at
    other row counts (on an AMX Xeon, float32 rows of a [576 x 1536] weight differ between calls of 63-128 rows
    and of 2048). A kernel alike up to 64 rows that takes another path from 100 rows on passed the probe when it
    compared counts up to 40 against one 64-row call; it is found out now (and then runs in fixed tiles)."""
    from sglite.runtime.batch_invariance import fixed_tile_rows, min_independent_rows
    from sglite.runtime.linear import DenseLinear

    class LargeCallPath(DenseLinear):
        def __call__(self, x, decode_from=None, out=None):
            y = super().__call__(x)
            return y + 0.25 if x.shape[0] >= 100 else y

    layer = LargeCallPath(torch.randn(48, 64, generator=torch.Generator().manual_seed(3)).bfloat16())
    assert min_independent_rows(layer) is None and fixed_tile_rows(layer) == 64


def test_bad_values_are_named(make_engine):
    with pytest.raises(ValueError, match="batch_invariant"):
        make_engine(batch_invariant="yes")


def test_a_prefill_layer_no_row_count_fixes_runs_in_fixed_tiles():
    """AMX's bfloat16 matmul computes a row differently as the call's row count changes, at any count, but alike
    at one fixed count: such a prefill layer runs in tiles of exactly that many rows (RowTiles), and a row then
    comes out the same bits whatever shares its call. A stand-in kernel with that behaviour shows it."""
    from sglite.runtime.batch_invariance import RowTiles, fixed_tile_rows, min_independent_rows, pad_prefill_rows
    from sglite.runtime.linear import DenseLinear, SizedLinear

    class CallSized(DenseLinear):    # each row's result depends on how many rows share the call
        def __call__(self, x, decode_from=None, out=None):
            y = super().__call__(x)
            return y + (x.shape[0] % 5) * 0.25

    g = torch.Generator().manual_seed(0)
    large = CallSized(torch.randn(32, 64, generator=g).bfloat16())
    assert min_independent_rows(large) is None and fixed_tile_rows(large) == 64
    sized = SizedLinear(DenseLinear(torch.randn(32, 64, generator=g).bfloat16()), large)
    pad_prefill_rows(sized, {id(large): 64}, frozenset({id(large)}))
    assert isinstance(sized.large, RowTiles) and sized.large.inner is large
    x = torch.randn(150, 64, generator=g).bfloat16()
    whole = sized(x)
    for a, n in ((0, 1), (5, 3), (7, 64), (70, 80)):
        assert torch.equal(sized(x[a:a + n]), whole[a:a + n]), (a, n)


def test_a_decoding_torch_layer_is_never_called_with_one_row():
    """torch's matmul computes a one-row call by its own path, whose bfloat16 bits differ from a longer call's
    in a few rows in a thousand (too rare for a probe of a few rows): a decoding layer on torch's kernel is padded
    to DECODE_MIN_ROWS, and every row computed alone then equals the same row in a call of 512."""
    from sglite.runtime.batch_invariance import (DECODE_MIN_ROWS, PaddedRows, min_independent_rows,
                                                 pad_decode_rows)
    from sglite.runtime.linear import DenseLinear, SizedLinear

    g = torch.Generator().manual_seed(0)
    layer = DenseLinear((torch.randn(64, 64, generator=g) * 0.1).bfloat16())
    assert DECODE_MIN_ROWS == 2 and min_independent_rows(layer) == DECODE_MIN_ROWS
    padded = pad_decode_rows(layer, {id(layer): DECODE_MIN_ROWS})
    assert isinstance(padded, PaddedRows) and padded.inner is layer
    assert pad_decode_rows(padded, {id(layer): DECODE_MIN_ROWS}) is padded            # once
    x = torch.randn(4096, 64, generator=g).bfloat16()
    whole = torch.cat([layer(x[a:a + 512]) for a in range(0, 4096, 512)])
    assert all(torch.equal(padded(x[i:i + 1]), whole[i:i + 1]) for i in range(4096))

    class OneRowPath(DenseLinear):   # a stand-in whose one-row path always differs
        def __call__(self, x, decode_from=None, out=None):
            y = super().__call__(x)
            return y + 0.25 if x.shape[0] == 1 else y

    small = OneRowPath(layer.weight)
    sized = SizedLinear(small, DenseLinear(layer.weight))
    assert min_independent_rows(small) == DECODE_MIN_ROWS
    assert pad_decode_rows(sized, {id(small): DECODE_MIN_ROWS}) is sized and isinstance(sized.small, PaddedRows)
    assert torch.equal(sized(x[:1], decode_from=0), layer(x[:2])[:1])
