"""A tiny random Llama folder (written by transformers) and peft adapters of it, built once per session."""
from __future__ import annotations

import pytest

from ..runtime.hf_checkpoints import PROMPT, VARIANTS, load_reference, write_checkpoint
from .adapters import make_peft_adapter


@pytest.fixture(scope="session")
def base_folder(tmp_path_factory, tokenizer):
    variant = next(v for v in VARIANTS if v.name == "llama-rope_parameters")
    return write_checkpoint(tmp_path_factory.mktemp("lora-base"), variant, tokenizer)


@pytest.fixture(scope="session")
def hf_base(base_folder):
    return load_reference(base_folder)


@pytest.fixture(scope="session")
def adapters(tmp_path_factory, hf_base):
    """name -> PEFT folder: 'all' (every projection, r 8), 'qv' (q and v, r 4, rsLoRA), 'mixed' (per-module
    ranks and alphas), 'other' (every projection, another seed)."""
    root = tmp_path_factory.mktemp("lora-adapters")
    return {
        "all": make_peft_adapter(hf_base, root / "all", r=8, alpha=16, seed=1),
        "qv": make_peft_adapter(hf_base, root / "qv", r=4, alpha=8, targets=["q_proj", "v_proj"], seed=2,
                                use_rslora=True),
        "mixed": make_peft_adapter(hf_base, root / "mixed", r=4, alpha=4, seed=3,
                                   rank_pattern={"down_proj": 2, "q_proj": 6}, alpha_pattern={"o_proj": 12}),
        "other": make_peft_adapter(hf_base, root / "other", r=8, alpha=16, seed=4),
    }


@pytest.fixture(scope="session")
def prompt_ids(tokenizer):
    return tokenizer.encode(PROMPT)
