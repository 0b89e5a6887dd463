"""The serving engine: requests, sampling, radix prefix cache, scheduler, model runner and the offline API.

EngineCore is the step (synchronous, one thread); EngineLoop runs a core on a thread and routes its chunks;
Engine is the public facade (SGLang's dict API plus the protocol's `submit`)."""
from sglite.protocol import SamplingParams

from .config import EngineConfig
from .core import EngineCore
from .engine import Engine
from .loop import EngineLoop

__all__ = ["Engine", "EngineConfig", "EngineCore", "EngineLoop", "SamplingParams"]
