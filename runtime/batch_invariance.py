"""Batch invariance: the policy that decides whether the engine can promise it, and the layer wrapping it needs.

The invariant (EngineConfig.batch_invariant, on by default where offered): with greedy decoding, a request's
tokens and logprobs are the same bits whatever other requests share its forward passes, however its prompt is
chunked, and whether its prefix is computed or read from the prefix cache. It holds when
  1. every projection computes a row the same whatever other rows share its call: our W4A8/W8A8 kernels by
     construction; torch's kernels as measured (min_independent_rows below), never in a call of one row (a
     decoding layer's one-row calls are padded to two: DECODE_MIN_ROWS). A layer that only ever sees prefill
     rows (a SizedLinear's large one) may be padded up to the row count from which it is, longer calls split into
     calls no longer than the probe compared (PaddedRows), or, where no count is (AMX's bfloat16 matmul picks its
     kernel by the call's row count), always called in tiles of one fixed row count (RowTiles, fixed_tile_rows);
  2. the attention backend computes each row alone (the torch backend on the CPU does: row_invariant);
  3. the rest of the layer is per-row arithmetic (norms, rotary, activations), which it is.
A layer that decodes and is not row-independent at every row count makes the property impossible: the engine
then reports it off (batch_invariant False in its stats), and batch_invariant=True is refused naming that layer.
"""
from __future__ import annotations

import torch

from .linear import Linear, PermutedInput, RefinedHead, SizedLinear, StackedLinear, W4A8Linear, W8A8Linear, _into, describe


# torch's matmul computes a one-row call by a path of its own (a matrix-vector product) whose bits differ from
# any longer call's in a few rows in a thousand, after rounding to bfloat16: of 4,096 random rows through
# oneDNN's bfloat16 kernels, 6 (AVX-512 BF16) and 4 (AMX) of a [64 x 64] weight, 329 of a [576 x 1536] down
# projection (AVX-512 BF16), none in calls of 2 to 512 rows. A probe of a few rows cannot see rates like these,
# so torch's kernels are never trusted with one row: the fewest rows they are called with is DECODE_MIN_ROWS
# (at batch 1 a decode step then computes two rows: about 15% more time in a bfloat16 projection, measured).
DECODE_MIN_ROWS = 2
# Row counts compared against one call of PROBE_TOTAL rows: every count from DECODE_MIN_ROWS to 16 (where kernels
# switch paths for small calls), then a spread up to PROBE_TOTAL, since the engine's prefill calls are large (a
# chunk of up to 2048 rows, with decode rows beside it): on an AMX Xeon with torch 2.13 the float32 matmul of a
# [576 x 1536] weight gives a row the bits of a 2048-row call in calls of 16-32 rows and other bits in calls of
# 63-128; its bfloat16 matmul agrees with a 2048-row call at 1-32 rows and from a few hundred on, and differs
# between. A probe against one 64-row call compares none of the counts a long chunk is computed at.
PROBE_ROWS = tuple(range(DECODE_MIN_ROWS, 17)) + (20, 24, 31, 33, 40, 63, 64, 65, 100, 128, 200, 256, 384, 511)
PROBE_TOTAL = 512       # the most rows a padded layer is called with: PaddedRows splits larger calls
PREFILL_MIN_ROWS = 16   # prefill-only layers are called with at least this many rows under batch invariance
_probed: dict[tuple, int | None] = {}   # (class, dtype, out, in, digits) -> min_independent_rows


def leaf_roles(layer) -> list[tuple[Linear, bool]]:
    """(plain layer, whether it computes decode rows) for each plain layer a projection calls: a SizedLinear's
    large layer computes prefill rows only; a RefinedHead's exact part is a per-row product and sum."""
    if isinstance(layer, SizedLinear):
        return [(x, True) for x, _ in leaf_roles(layer.small)] + [(x, False) for x, _ in leaf_roles(layer.large)]
    if isinstance(layer, RefinedHead):
        return leaf_roles(layer.approx)
    if isinstance(layer, StackedLinear):
        return [role for part in layer.parts for role in leaf_roles(part)]
    if isinstance(layer, (PaddedRows, RowTiles, PermutedInput)):
        return leaf_roles(layer.inner)
    return [(layer, True)]


def min_independent_rows(layer) -> int | None:
    """The fewest rows a call of `layer` must have for each row to come out the same bits whatever other rows
    share the call (1: any call), or None when no count up to 16 does. Our W4A8/W8A8 kernels: 1, by construction
    (a row's arithmetic is the same in any group of rows; tests/kernels). torch's kernels: at least
    DECODE_MIN_ROWS (their one-row path), and as measured from there, once per
    process for each class, dtype, shape and digits, on the counts of PROBE_ROWS, each at the start and the end
    of one PROBE_TOTAL-row call, against that call: a padded layer is never called with more rows (PaddedRows),
    so every call the engine makes lies in the range compared. On an AVX-512 Zen 4 with torch 2.13 the float32
    matmul took other paths below 12 rows; its bfloat16 one once gave a single row of a [576 x 1536] weight
    other bits and in later processes did not, so a probe that passes is evidence, not proof (the engine pads
    prefill-only layers anyway: PREFILL_MIN_ROWS)."""
    if isinstance(layer, (W4A8Linear, W8A8Linear)):
        return 1
    key = (type(layer).__name__, layer.dtype, layer.out_features, layer.in_features, getattr(layer, "digits", 0))
    if key not in _probed:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(PROBE_TOTAL, layer.in_features, generator=g).to(layer.dtype)
        full = layer(x)
        bad = []
        for m in PROBE_ROWS:
            if not all(torch.equal(layer(x[a:a + m]), full[a:a + m]) for a in (0, PROBE_TOTAL - m)):
                bad.append(m)
                if m >= 16:     # no padding helps: settled
                    break
        _probed[key] = DECODE_MIN_ROWS if not bad else max(bad) + 1 if max(bad) < 16 else None
    return _probed[key]


TILE_ROWS = (64, 32, 16)   # fixed call sizes tried, largest first, for a layer no row count makes row-independent


def fixed_tile_rows(layer, sizes: tuple[int, ...] = TILE_ROWS) -> int | None:
    """The first tile T of `sizes` (default TILE_ROWS) such that a row computed in a call of exactly T rows comes out the same bits
    at every position of the call and whatever rows share it, or None. AMX's bfloat16 matmul (oneDNN) computes a
    row differently as the call's row count changes, so no minimum row count helps it (min_independent_rows is
    None), yet at one fixed count every row takes the same path: RowTiles then makes it row-independent.
    Measured once per process for each class, dtype and shape, like min_independent_rows."""
    key = ("tile", type(layer).__name__, layer.dtype, layer.out_features, layer.in_features, sizes)
    if key not in _probed:
        g = torch.Generator().manual_seed(1)
        _probed[key] = None
        for t in sizes:
            x = torch.randn(2 * t, layer.in_features, generator=g).to(layer.dtype)
            ref = layer(x[:t])
            if all(torch.equal(layer(x[a:a + t])[:t - a], ref[a:]) for a in {1, 3 % t, t // 2, t - 1} if a):
                _probed[key] = t
                break
    return _probed[key]


def row_independent(layer) -> "Linear":
    """`layer` so called that each row comes out the same bits whatever rows share its calls, for a layer that
    computes decode and prefill rows alike (a LoRA factor): itself where any call is row-independent, padded to
    its minimum row count (PaddedRows), in tiles of a fixed count (RowTiles), or one row a call (RowTiles of 1,
    row-independent by construction) where the probes find neither."""
    m = min_independent_rows(layer)
    if m == 1:
        return layer
    if m is not None:
        return PaddedRows(layer, m)
    return RowTiles(layer, fixed_tile_rows(layer) or 1)


class RowTiles:
    """`inner` called only with exactly `rows` rows (the last tile padded with zero rows, their results dropped),
    for a kernel that computes a row alike in every call of that size (fixed_tile_rows)."""

    def __init__(self, inner: Linear, rows: int):
        self.inner, self.rows = inner, rows
        self.in_features, self.out_features, self.dtype = inner.in_features, inner.out_features, inner.dtype

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        n, t = x.shape[0], self.rows
        if n == t or n == 0:
            return self.inner(x, decode_from, out=out)
        tiles = -(-n // t)
        padded = torch.cat([x, x.new_zeros(tiles * t - n, x.shape[1])]) if n % t else x
        y = torch.cat([self.inner(padded[i * t:(i + 1) * t]) for i in range(tiles)])
        return _into(y[:n], out)

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes


class PaddedRows:
    """`inner` called with at least `min_rows` and at most PROBE_TOTAL rows (zero rows added, their results
    dropped; a longer call split into calls of PROBE_TOTAL rows and one of the rest): where a kernel computes a
    row alike in every call of that many rows or more, and otherwise below (min_independent_rows, which compares
    calls up to PROBE_TOTAL rows)."""

    def __init__(self, inner: Linear, min_rows: int):
        self.inner, self.min_rows = inner, min_rows
        self.in_features, self.out_features, self.dtype = inner.in_features, inner.out_features, inner.dtype

    def __call__(self, x: torch.Tensor, decode_from: int | None = None, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        n = x.shape[0]
        if self.min_rows <= n <= PROBE_TOTAL or n == 0:
            return self.inner(x, decode_from, out=out)
        if n > PROBE_TOTAL:
            y = torch.cat([self(x[a:a + PROBE_TOTAL]) for a in range(0, n, PROBE_TOTAL)])
            return _into(y, out)
        padded = torch.cat([x, x.new_zeros(self.min_rows - n, x.shape[1])])
        return _into(self.inner(padded, decode_from)[:n], out)

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes


def pad_prefill_rows(layer, rows: dict[int, int], tiled: frozenset[int] = frozenset()) -> None:
    """Wraps, in place, each prefill-only plain layer (a SizedLinear's large one) of projection `layer` whose id
    is in `rows` in PaddedRows of that many rows, or in RowTiles of that many where its id is in `tiled` (once: a
    layer already wrapped is left as it is)."""
    if isinstance(layer, RefinedHead):
        pad_prefill_rows(layer.approx, rows, tiled)
    elif isinstance(layer, StackedLinear):
        for part in layer.parts:
            pad_prefill_rows(part, rows, tiled)
    elif isinstance(layer, PermutedInput):
        pad_prefill_rows(layer.inner, rows, tiled)
    elif isinstance(layer, SizedLinear) and not isinstance(layer.large, (PaddedRows, RowTiles)) \
            and id(layer.large) in rows:
        wrap = RowTiles if id(layer.large) in tiled else PaddedRows
        layer.large = wrap(layer.large, rows[id(layer.large)])


def pad_decode_rows(layer, rows: dict[int, int]):
    """`layer` with each decoding plain layer whose id is in `rows` wrapped in PaddedRows of that many rows (a
    SizedLinear's small one and a RefinedHead's approximate pass in place; a plain projection is returned
    wrapped, to be put where it was). A layer already wrapped is left as it is."""
    if isinstance(layer, RefinedHead):
        layer.approx = pad_decode_rows(layer.approx, rows)
    elif isinstance(layer, StackedLinear):
        layer.parts = [pad_decode_rows(part, rows) for part in layer.parts]
    elif isinstance(layer, PermutedInput):
        layer.inner = pad_decode_rows(layer.inner, rows)
    elif isinstance(layer, SizedLinear):
        layer.small = pad_decode_rows(layer.small, rows)
    elif not isinstance(layer, (PaddedRows, RowTiles)) and id(layer) in rows:
        return PaddedRows(layer, rows[id(layer)])
    return layer


def offered(device: torch.device, attention_backend: str | None) -> bool:
    """Whether the attention backend can compute each row alone here (the torch backend on the CPU)."""
    return device.type == "cpu" and attention_backend in (None, "torch")


def prepare_layers(net) -> object | None:
    """Wraps `net`'s layers (in place) so each computes a row alike in every call (prefill-only ones padded or
    tiled, decoding torch kernels padded to DECODE_MIN_ROWS), and returns None,
    or returns the first plain layer that decodes and computes a row differently with other rows beside it (then
    nothing is wrapped and the property cannot hold)."""
    pads: dict[int, int] = {}
    decode_pads: dict[int, int] = {}
    tiled: set[int] = set()
    for layer in net.linears():
        for leaf, decodes in leaf_roles(layer):
            rows = min_independent_rows(leaf)
            if rows is None and not decodes and (tile := fixed_tile_rows(leaf)) is not None:
                pads[id(leaf)] = tile   # AMX's bf16 matmul: every prefill call made exactly `tile` rows
                tiled.add(id(leaf))
            elif rows is None or (decodes and rows > DECODE_MIN_ROWS):
                return leaf
            elif not decodes:    # a prefill call of few rows is rare: pad past any small-call path
                pads[id(leaf)] = max(rows, PREFILL_MIN_ROWS)
            elif rows > 1:       # torch's kernel at batch 1: two rows a call
                decode_pads[id(leaf)] = rows
    for layer in net.linears():
        pad_prefill_rows(layer, pads, frozenset(tiled))
    net.head = pad_decode_rows(net.head, decode_pads)
    for L in net.layers:
        for name in net.PROJECTIONS:
            setattr(L, name, pad_decode_rows(getattr(L, name), decode_pads))
    return None


def refusal(dependent, attn, device: torch.device) -> str:
    """Why batch_invariant=True cannot hold, for the error the engine raises."""
    why = (f"the {describe(dependent)} projection computes a row differently with other rows beside it"
           if dependent is not None else f"the {type(attn).__name__} on {device} does not offer it (the torch "
           "attention backend on the CPU does)")
    return f"batch_invariant=True cannot hold: {why}; pass batch_invariant=None or False"
