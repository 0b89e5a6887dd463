"""LoraAdapter: one loaded adapter's low-rank factors, fused per projection the way the base model fuses them.

The model runs q|k|v as one projection and gate|up as another (runtime/model.py). An adapter's factors for the
modules of one fused projection become one pair (A, B): A stacks the modules' A rows, B places each module's
scaled B in its output rows and its own rank columns (zeros elsewhere), so that

    delta = (x @ A.T) @ B.T      x [T, in] -> [T, out]

is each module's `scaling * B_m @ A_m @ x` in its slice of the output, as PEFT computes it module by module.
Factors are float32 whatever the base's weight format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..config import ModelConfig

# the model's fused projections and, in order, the modules each holds (PEFT's names)
PROJECTIONS: dict[str, tuple[str, ...]] = {
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "gate_up": ("gate_proj", "up_proj"),
    "down": ("down_proj",),
}
MODULES = tuple(m for ms in PROJECTIONS.values() for m in ms)
PROJECTION_OF = {m: p for p, ms in PROJECTIONS.items() for m in ms}


class LoraError(ValueError):
    """An adapter that cannot be loaded or used: missing, malformed, not fitting the base, or unknown."""


class LoraInUseError(LoraError):
    """An adapter that requests still hold cannot be unloaded."""


class ModuleFactors(NamedTuple):
    """One module's factors as the file holds them: y += scaling * B @ (A @ x)."""
    a: torch.Tensor        # [r, in] float32
    b: torch.Tensor        # [out, r] float32
    scaling: float


def module_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each module of one layer of the base."""
    c = config
    return {"q_proj": (c.hidden_size, c.q_size), "k_proj": (c.hidden_size, c.kv_size),
            "v_proj": (c.hidden_size, c.kv_size), "o_proj": (c.q_size, c.hidden_size),
            "gate_proj": (c.hidden_size, c.intermediate_size), "up_proj": (c.hidden_size, c.intermediate_size),
            "down_proj": (c.intermediate_size, c.hidden_size)}


class FusedFactors(NamedTuple):
    a: torch.Tensor        # [R, in] float32, R = the sum of the modules' ranks
    b: torch.Tensor        # [out, R] float32, scaling folded in


@dataclass(eq=False)
class LoraAdapter:
    """An adapter ready to run: per layer, per fused projection, its factors (None: the projection is untouched).
    Immutable once built; `holders` counts the requests running under it (LoraManager keeps it)."""
    name: str
    path: str
    uid: int                                     # > 0, never reused in the process: the prefix cache's namespace
    layers: list[dict[str, FusedFactors]]       # [num_layers] {projection: factors}
    ranks: frozenset[int]
    holders: int = field(default=0, repr=False)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * 4 for layer in self.layers for f in layer.values() for t in f)

    def targets(self) -> list[str]:
        return sorted({p for layer in self.layers for p in layer})


def fuse(config: ModelConfig, factors: dict[tuple[int, str], ModuleFactors], source: str,
         name: str = "", uid: int = 0) -> LoraAdapter:
    """The adapter from per-(layer, module) factors, checked against the base: layer indices in range, each
    module's A [r, in] and B [out, r] of the base's sizes. Raises LoraError naming the tensor that does not fit."""
    if not factors:
        raise LoraError(f"LoRA adapter {source!r} holds no LoRA weights for any of {', '.join(MODULES)}")
    shapes = module_shapes(config)
    for (layer, module), f in factors.items():
        where = f"LoRA adapter {source!r}: layer {layer} {module}"
        if not 0 <= layer < config.num_layers:
            raise LoraError(f"{where}: the base model has {config.num_layers} layers (0..{config.num_layers - 1})")
        n_in, n_out = shapes[module]
        r = f.a.shape[0]
        if f.a.dim() != 2 or f.b.dim() != 2 or r == 0:
            raise LoraError(f"{where}: lora_A {tuple(f.a.shape)} and lora_B {tuple(f.b.shape)} must be matrices "
                            "of rank >= 1")
        if f.a.shape[1] != n_in or f.b.shape[0] != n_out:
            raise LoraError(f"{where}: lora_A is {tuple(f.a.shape)} and lora_B {tuple(f.b.shape)}, but the base's "
                            f"{module} maps {n_in} -> {n_out} features (expected [r, {n_in}] and [{n_out}, r]); the "
                            "adapter was trained for another model")
        if f.b.shape[1] != r:
            raise LoraError(f"{where}: lora_A has rank {r} but lora_B {tuple(f.b.shape)} has {f.b.shape[1]} columns")
        if not (torch.isfinite(f.a).all() and torch.isfinite(f.b).all()):
            raise LoraError(f"{where}: the factors hold NaN or infinite values")
    layers: list[dict[str, FusedFactors]] = [{} for _ in range(config.num_layers)]
    for layer in range(config.num_layers):
        for proj, modules in PROJECTIONS.items():
            present = [m for m in modules if (layer, m) in factors]
            if not present:
                continue
            n_in = shapes[modules[0]][0]
            outs = [shapes[m][1] for m in modules]
            rank = sum(factors[layer, m].a.shape[0] for m in present)
            a = torch.empty(rank, n_in)
            b = torch.zeros(sum(outs), rank)
            col = 0
            for m, row in zip(modules, [sum(outs[:i]) for i in range(len(modules))]):
                if m in present:
                    f = factors[layer, m]
                    r = f.a.shape[0]
                    a[col:col + r] = f.a
                    b[row:row + f.b.shape[0], col:col + r] = f.b * f.scaling
                    col += r
            layers[layer][proj] = FusedFactors(a.contiguous(), b.contiguous())
    ranks = frozenset(f.a.shape[0] for f in factors.values())
    return LoraAdapter(name, source, uid, layers, ranks)
