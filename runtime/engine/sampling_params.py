"""The engine's sampling options are the protocol's: one definition, in sglite/protocol.py. What the engine
adds is the defaults it fills where a request leaves a field unset (None)."""
from sglite.protocol import SamplingParams

__all__ = ["SamplingParams", "CONSTRAINED_DRY_MULTIPLIER", "dry_multiplier"]

# DRY for JSON-schema outputs when the request sets none: picked by bench/finish_rate.py (greedy, the default
# model, real schemas; see its table in the README). Unconstrained text and other constraints keep DRY off.
CONSTRAINED_DRY_MULTIPLIER = 0.8


def dry_multiplier(params: SamplingParams) -> float:
    """The DRY multiplier a request runs with (0: off): its own, else the engine's default for its constraint."""
    if params.dry_multiplier is not None:
        return params.dry_multiplier
    return CONSTRAINED_DRY_MULTIPLIER if params.json_schema is not None else 0.0
