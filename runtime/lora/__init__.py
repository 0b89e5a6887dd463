"""Multi-LoRA: adapters loaded beside one base model, run per request in shared forward passes.

    manager = LoraManager(config, max_loras_per_batch)
    manager.load("risk", "adapters/risk")      # a PEFT folder or a llama.cpp GGUF LoRA file
    batch = LoraBatch.build([adapter_or_None per request], rows per request)
    batch.apply(layer, "qkv", x, y)            # inside the model's forward pass
"""
from .adapter import PROJECTIONS, LoraAdapter, LoraError, LoraInUseError, ModuleFactors, fuse
from .batch import LoraBatch
from .manager import LoraManager, load_lora_adapter, lora_format

__all__ = ["PROJECTIONS", "LoraAdapter", "LoraBatch", "LoraError", "LoraInUseError", "LoraManager",
           "ModuleFactors", "fuse", "load_lora_adapter", "lora_format"]
