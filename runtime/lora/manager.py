"""LoraManager: the adapters an engine may run, loaded and unloaded while requests run.

Thread-safety: `load` reads and checks the file on the caller's thread, outside the lock, then publishes the
adapter; every other method holds the lock briefly. A request holds its adapter from `acquire` (when it is
validated) to `release` (when it finishes or is dropped unqueued); `unload` refuses an adapter held by any."""
from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

from ..config import ModelConfig
from .adapter import LoraAdapter, LoraError, LoraInUseError, fuse
from .gguf_format import is_gguf_file, read_gguf_lora
from .peft_format import is_peft_folder, read_peft


def lora_format(path: str | os.PathLike) -> str:
    """'peft' or 'gguf': what kind of adapter `path` holds, judged by its files alone (nothing is read past a
    GGUF magic), so a bad path fails before any model loads. Raises LoraError naming the path and the problem."""
    p = Path(path)
    if not p.exists():
        raise LoraError(f"LoRA adapter path {str(p)!r} does not exist")
    if is_peft_folder(p):
        return "peft"
    if is_gguf_file(p):
        return "gguf"
    if p.is_dir():
        raise LoraError(f"LoRA adapter folder {str(p)!r} has no adapter_config.json (a PEFT adapter folder has it "
                        "beside adapter_model.safetensors)")
    raise LoraError(f"LoRA adapter file {str(p)!r} is not a GGUF file (convert a PEFT adapter with llama.cpp's "
                    "convert_lora_to_gguf.py, or pass the PEFT folder)")


def load_lora_adapter(path: str | os.PathLike, config: ModelConfig, name: str = "", uid: int = 0) -> LoraAdapter:
    """A PEFT folder or a llama.cpp GGUF LoRA file as an adapter for a base of `config`. Raises LoraError naming
    what is wrong (missing path, unknown format, unsupported option, shapes that do not fit the base)."""
    p = Path(path)
    factors = read_peft(p) if lora_format(p) == "peft" else read_gguf_lora(p, config)
    return fuse(config, factors, str(p), name, uid)


class LoraManager:
    def __init__(self, config: ModelConfig, max_loras_per_batch: int):
        self.config = config
        self.max_loras_per_batch = max_loras_per_batch
        self._adapters: dict[str, LoraAdapter] = {}     # load order
        self._uids = itertools.count(1)
        self._lock = threading.Lock()

    def load(self, name: str, path: str | os.PathLike) -> LoraAdapter:
        """Loads `path` under `name`. Raises LoraError (nothing changes) on a bad adapter or a name in use."""
        if not isinstance(name, str) or not name:
            raise LoraError(f"a LoRA adapter needs a non-empty name, got {name!r}")
        if name in self:
            raise LoraError(f"a LoRA adapter named {name!r} is already loaded; unload it first or pick another name")
        adapter = load_lora_adapter(path, self.config, name)
        with self._lock:
            if name in self._adapters:
                raise LoraError(f"a LoRA adapter named {name!r} is already loaded")
            adapter.uid = next(self._uids)
            self._adapters[name] = adapter
        return adapter

    def unload(self, name: str) -> None:
        """Forgets `name`. Raises LoraError for an unknown name, LoraInUseError while requests hold it."""
        with self._lock:
            adapter = self._get(name)
            if adapter.holders:
                raise LoraInUseError(f"LoRA adapter {name!r} is in use by {adapter.holders} request(s); unload it "
                                     "once they finish")
            del self._adapters[name]

    def acquire(self, name: str) -> LoraAdapter:
        """The adapter `name`, held for one request until `release`. Raises LoraError for an unknown name."""
        with self._lock:
            adapter = self._get(name)
            adapter.holders += 1
            return adapter

    def release(self, adapter: LoraAdapter) -> None:
        with self._lock:
            if adapter.holders <= 0:
                raise RuntimeError(f"LoRA adapter {adapter.name!r} released more often than acquired")
            adapter.holders -= 1

    def names(self) -> list[str]:
        with self._lock:
            return list(self._adapters)

    def get(self, name: str) -> LoraAdapter:
        with self._lock:
            return self._get(name)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._adapters

    def _get(self, name: str) -> LoraAdapter:
        adapter = self._adapters.get(name)
        if adapter is None:
            raise LoraError(f"no LoRA adapter named {name!r} is loaded; loaded: {list(self._adapters) or 'none'}")
        return adapter
