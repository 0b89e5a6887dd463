"""One log line on load that says what was loaded: architecture, size, dtype, context, rope, chat template."""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from .config import ModelConfig

logger = logging.getLogger("sglite.runtime")


def rope_summary(config: ModelConfig) -> str:
    parts = [f"theta={config.rope_theta:g}"]
    if config.rope_local_theta is not None:
        parts.append(f"windowed layers theta={config.rope_local_theta:g}")
    if config.rotary_dim != config.head_dim:
        parts.append(f"partial rotary {config.rotary_dim}/{config.head_dim} dims")
    parts.append("no scaling" if config.rope_scaling is None else config.rope_scaling.describe())
    return ", ".join(parts)


def model_card(path: Path, config: ModelConfig, num_parameters: int, compute: str,
               chat_template_source: str | None) -> str:
    """compute: how the forward pass runs, e.g. 'float32' or 'int8 weights, bfloat16 activations'."""
    c = config
    stored = f", stored as {c.checkpoint_dtype}" if c.checkpoint_dtype else ""
    context = f"context {c.max_context}"
    if c.context_limit_reason:
        context += f" (capped: {c.context_limit_reason})"
    if c.sliding_window is not None:
        windowed = c.num_layers if c.sliding_layers is None else sum(c.sliding_layers)
        context += f"; sliding window {c.sliding_window} on {windowed}/{c.num_layers} layers"
    return (f"loaded {c.architecture} from {path}: {num_parameters / 1e6:.1f}M parameters, computing in "
            f"{compute}{stored}; {context}; rope {rope_summary(c)}; "
            f"chat template from {chat_template_source or 'nowhere (none found)'}")


def compute_summary(net) -> str:
    """'float32', or the weight plan and activation dtype of a LlamaModel that quantizes its projections."""
    dtype = str(net.dtype).removeprefix("torch.")
    plan = getattr(net, "plan", None)
    formats = sorted({plan.small, plan.large}) if plan is not None else []
    if not formats or formats == ["fp32"]:
        return dtype
    return f"{'+'.join(formats)} weights, {dtype} activations"


def log_model_card(path: Path, config: ModelConfig, weights: dict[str, torch.Tensor], net,
                   chat_template_source: str | None) -> None:
    """Logs the card at INFO on the `sglite.runtime` logger. Counts parameters once: a tied output head is the
    embedding, so an output.weight the config ties is not counted."""
    used = [k for k in weights if not (k == "output.weight" and config.tie_word_embeddings)]
    size = getattr(weights, "numel", None)      # a lazy GGUF mapping counts without reading a tensor
    n = sum(size(k) if size is not None else weights[k].numel() for k in used)
    logger.info(model_card(path, config, n, compute_summary(net), chat_template_source))
