"""The serving engine: requests, sampling, radix prefix cache, scheduler, model runner and the offline API."""
from .config import EngineConfig
from .engine import Engine
from .sampling_params import SamplingParams

__all__ = ["Engine", "EngineConfig", "SamplingParams"]
