"""Bad model inputs fail early with errors that name the file and the problem."""
from __future__ import annotations

import pytest

from sglite.runtime.gguf_loader import GGUFError, GGUFFile
from sglite.runtime.model_source import ModelNotFoundError, default_model_path, resolve_model_path


def test_missing_model_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelNotFoundError, match="nope.gguf"):
        resolve_model_path(missing)


def test_env_var_selects_model(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLITE_MODEL", str(tmp_path / "other.gguf"))
    with pytest.raises(ModelNotFoundError, match="other.gguf"):
        resolve_model_path(None)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"\0" * 16)
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve_model_path(bad)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve_model_path(tmp_path)


def test_truncated_gguf(tmp_path):
    src = default_model_path()
    cut = tmp_path / "truncated.gguf"
    with open(src, "rb") as f:
        cut.write_bytes(f.read(2_000_000))
    with pytest.raises(GGUFError, match="truncated.gguf"):
        GGUFFile(cut)


def test_unknown_architecture(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "bert.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="architecture 'bert'"):
        GGUFFile(path)


def test_unknown_architecture_in_config():
    from sglite.runtime.config import ModelConfig

    with pytest.raises(ValueError, match="unknown architecture 'gpt2'"):
        ModelConfig("gpt2", 1, 8, 16, 2, 1, 10, 4)
