"""The engine's sampling options are the protocol's: one definition, in sglite/protocol.py. What the engine
adds is the defaults it fills where a request leaves a field unset (None)."""
from sglite.protocol import SamplingParams

__all__ = ["SamplingParams", "CONSTRAINED_DRY_MULTIPLIER", "dry_multiplier"]

# DRY for JSON-schema outputs when the request sets none, chosen by measurement (docs/BENCHMARKS.md, finishing
# and field accuracy): the strongest setting that finishes more outputs without costing gold fields or copying
# few-shot text into records. Unconstrained text and other constraints keep DRY off.
CONSTRAINED_DRY_MULTIPLIER = 0.3


def dry_multiplier(params: SamplingParams) -> float:
    """The DRY multiplier a request runs with (0: off): its own, else the engine's default for its constraint."""
    if params.dry_multiplier is not None:
        return params.dry_multiplier
    return CONSTRAINED_DRY_MULTIPLIER if params.json_schema is not None else 0.0
