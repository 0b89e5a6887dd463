"""The engine's sampling options are the protocol's: one definition, in sglite/protocol.py. What the engine
adds is the defaults it fills where a request leaves a field unset (None)."""
from sglite.protocol import SamplingParams

__all__ = ["SamplingParams", "CONSTRAINED_DRY_MULTIPLIER", "dry_multiplier"]

# DRY for JSON-schema outputs when the request sets none, picked by measurement (README, "Finishing"): on 24 real
# schemas (bench/finish_rate.py) 0.3 finished 17 valid against 11 with DRY off and 19 at 0.8; 0.8 without '"' and
# '*' as breakers finished 21-22, the only setting past the 85% target, but lost 6 gold fields and won 1 of 699
# against 0.3 on the main job's 20 reports plus 80 synthetic ones (bench/extraction_accuracy.py --sets
# bundled,synthetic) and copied few-shot text into 15 more records (p 0.0005), while 0.3 was even with DRY off
# (1 : 1), so accuracy decided. Unconstrained text and other constraints keep DRY off.
CONSTRAINED_DRY_MULTIPLIER = 0.3


def dry_multiplier(params: SamplingParams) -> float:
    """The DRY multiplier a request runs with (0: off): its own, else the engine's default for its constraint."""
    if params.dry_multiplier is not None:
        return params.dry_multiplier
    return CONSTRAINED_DRY_MULTIPLIER if params.json_schema is not None else 0.0
