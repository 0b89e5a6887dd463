"""The engine's sampling options are the protocol's: one definition, in sglite/protocol.py."""
from sglite.protocol import SamplingParams

__all__ = ["SamplingParams"]
