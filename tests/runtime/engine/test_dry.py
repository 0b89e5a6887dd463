"""DRY sampling: the match state against a brute-force reference, the sampler's penalties (batched, off rows
untouched), the engine default, and whole generations with the tiny model."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from sglite.protocol import RequestError
from sglite.runtime.engine.dry import DryState, dry_penalties
from sglite.runtime.engine.request import Req
from sglite.runtime.engine.sampler import Sampler
from sglite.runtime.engine.sampling_params import CONSTRAINED_DRY_MULTIPLIER, SamplingParams, dry_multiplier


def _reference(hist: list[int], breakers: set[int], allowed: int) -> dict[int, int]:
    """token -> longest k >= allowed such that hist[-k:] + [token] occurred earlier with no breaker in it."""
    n = len(hist)
    out: dict[int, int] = {}
    for i in range(n - 1):       # an earlier end position; hist[i + 1] followed it
        k = 0
        while k <= i and hist[i - k] == hist[n - 1 - k] and hist[i - k] not in breakers:
            k += 1
        if k >= allowed:
            out[hist[i + 1]] = max(out.get(hist[i + 1], 0), k)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_state_matches_reference(seed):
    rng = random.Random(seed)
    vocab, breakers = 5, {4}
    mask = np.zeros(vocab, bool)
    mask[list(breakers)] = True
    state = DryState(mask)
    hist: list[int] = []
    for _ in range(80):
        hist += [rng.choice([0, 1, 2, 0, 1, 3, 4][:rng.choice([3, 7])]) for _ in range(rng.choice([1, 1, 3]))]
        state.update(hist)
        for allowed in (1, 2, 3):
            tokens, lengths = state.repeats(allowed)
            assert dict(zip(tokens.tolist(), lengths.tolist())) == _reference(hist, breakers, allowed), hist


def test_state_starts_over_when_the_output_is_rewound():
    state = DryState(np.zeros(4, bool))
    state.update([1, 2, 1, 2, 1])
    state.update([1, 2])
    assert dict(zip(*(a.tolist() for a in state.repeats(1)))) == _reference([1, 2], set(), 1) == {}


def _req(output_ids, **kw) -> Req:
    r = Req("r", [1, 2, 3], SamplingParams(temperature=0, **kw), generator=torch.Generator().manual_seed(0))
    r.output_ids = list(output_ids)
    return r


def test_sampler_penalises_only_dry_rows():
    vocab = 8
    tb = [bytes([97 + i]) for i in range(vocab)]
    tb[7] = b":"                                    # a breaker (default breakers include ':')
    s = Sampler(vocab, eos_token_id=None, token_bytes=lambda: tb)
    hist = [1, 2, 3, 1, 2, 3, 1, 2]                # next: 3 would extend "1 2 3 1 2" (k = 5)
    on = _req(hist, dry_multiplier=0.8)
    off = _req(hist, dry_multiplier=0)
    broken = _req([1, 2, 3, 7, 1, 2], dry_multiplier=0.8)   # the breaker ends the match at "1 2"
    logits = torch.zeros(3, vocab)
    s._apply_dry(logits, [on, off, broken])
    want = np.zeros(vocab, np.float32)
    want[3] = -dry_penalties(np.array([5]), 0.8, 1.75, 2)[0]
    assert torch.equal(logits[0], torch.from_numpy(want))
    assert torch.equal(logits[1], torch.zeros(vocab))
    want = np.zeros(vocab, np.float32)
    want[3] = -0.8                                  # k = 2 = allowed_length: multiplier * base^0
    assert torch.equal(logits[2], torch.from_numpy(want))
    assert dry_penalties(np.array([5]), 0.8, 1.75, 2)[0] == pytest.approx(0.8 * 1.75 ** 3)
    # huge lengths stay finite
    assert np.isfinite(dry_penalties(np.array([10_000]), 100.0, 100.0, 1)).all()


def test_default_is_on_for_json_schema_only():
    assert dry_multiplier(SamplingParams()) == 0.0
    assert dry_multiplier(SamplingParams(regex="a+")) == 0.0
    assert dry_multiplier(SamplingParams(json_schema='{"type": "string"}')) == CONSTRAINED_DRY_MULTIPLIER > 0
    assert dry_multiplier(SamplingParams(json_schema='{"type": "string"}', dry_multiplier=0.0)) == 0.0
    assert dry_multiplier(SamplingParams(dry_multiplier=1.5)) == 1.5


@pytest.mark.parametrize("bad, param", [({"dry_multiplier": -1}, "dry_multiplier"), ({"dry_base": 1}, "dry_base"),
                                        ({"dry_allowed_length": 0}, "dry_allowed_length"),
                                        ({"dry_sequence_breakers": [""]}, "dry_sequence_breakers"),
                                        ({"dry_multiplier": "x"}, "dry_multiplier")])
def test_bad_values_name_their_field(bad, param):
    with pytest.raises(RequestError) as e:
        SamplingParams.from_dict(bad)
    assert e.value.param == param


def _longest_repeat(ids: list[int]) -> int:
    """The longest k such that some k-gram occurs twice in ids."""
    best = 0
    for k in range(1, len(ids)):
        grams = [tuple(ids[i:i + k]) for i in range(len(ids) - k + 1)]
        if len(set(grams)) == len(grams):
            break
        best = k
    return best


def test_generation_with_dry(tiny_model):
    """Greedy stays deterministic; a strong DRY leaves no 3-gram twice (a breaker no token holds). The tiny model
    with tied embeddings loops, which is what DRY is for."""
    from sglite.runtime.engine import Engine
    with Engine(tiny_model, max_total_tokens=4096) as e:
        e.core.debug_checks = True
        _generation_with_dry(e)


def _generation_with_dry(e):
    base = {"temperature": 0, "max_new_tokens": 48, "ignore_eos": True}
    plain = e.generate("The weather today", base)["output_ids"]
    dry = dict(base, dry_multiplier=100.0, dry_sequence_breakers=["\x00\x01"])
    first = e.generate("The weather today", dry)["output_ids"]
    e.flush_cache()
    batched = e.generate(["other prompt", "The weather today"], [base, dry])
    assert batched[1]["output_ids"] == first
    assert batched[0]["output_ids"] == e.generate("other prompt", base)["output_ids"]
    assert _longest_repeat(plain) > 2, "the tiny model must loop for this test to mean anything"
    assert _longest_repeat(first) <= 2


def test_breaker_tokens_match_a_search_token_by_token():
    """The one-pass search over the joined vocabulary finds exactly the tokens that hold a breaker: at a token's
    start or end, several times in one token, next to or holding a NUL byte, and never across two tokens."""
    from sglite.runtime.engine.dry import breaker_tokens
    vocab = [b"a", b"b:", b":c", b"x::y", b"\x00", b"q\x00:", b"ab", b"", b"\n", b"a\nb", b"\xc3\xa9", b"a" * 40]
    for breakers in (["\n", ":"], ["ab"], ["a"], ["\x00"], [""], ["é", "b:"], ["b\x00"], [], [":c", "x:"],
                     ["ba"]):   # "ba" only across "a" | "b:"
        want = [any(p.encode() in t for p in breakers) for t in vocab]
        assert breaker_tokens(vocab, breakers).tolist() == want, breakers
