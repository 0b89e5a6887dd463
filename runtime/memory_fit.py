"""Whether a model fits in this machine's memory, decided before a weight is read: what the weights will take in
the plan's formats, what the KV cache will take, and what the machine has free. A model that does not fit is
refused with those numbers instead of being killed by the kernel halfway through loading.

    need = estimate(tensors, config, plan, kv_bytes)     # Need(weights, transient, kv, runtime), bytes
    check_fits(need, path, plan)                          # ModelDoesNotFitError naming needed vs available

Bytes per weight by the file's block type and the format that runs it (runtime/linear.py, kernels/): the 4-bit
formats keep Q4_0/Q4_1/Q4_K blocks at 4.5-5 bits (q plus float16 d and m per 32), the 8-bit block types on the
W8A8 kernel at its layout's bits (Q8_0 8.5, Q6_K 6.5625: 6 bits, the file's int8 scales and float16 d, Q5_0
5.5, Q5_1 6), other types as int8 per channel; bf16 2 bytes, fp32 4. A GGUF file's embedding (and untied head)
stays as its grid (1 byte a value plus float32 scales, grid_matrix.py) or float32 for a type read by value; the
head's 4-bit ranking copy adds 5 bits a value. `transient` is the largest projection's float32 copy, grid and packing buffers (8 bytes a
weight) or the head's grid while its ranking copy is packed (2 bytes a value), whichever is larger; `runtime`
what torch, numba and the kernels hold before the first weight (measured: about 0.6 GB)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNTIME_BYTES = 600_000_000
FOUR_BIT_BLOCKS = {"Q4_0": 4.5, "Q4_1": 5.0, "Q4_K": 5.0}                # bits a weight under the 4-bit formats
EIGHT_BIT_BLOCKS = {"Q8_0": 8.5, "Q6_K": 6.5625, "Q5_0": 5.5, "Q5_1": 6.0, "Q5_K": 6.0, "Q2_K": 10.0, "Q3_K": 10.0,
                    "IQ4_NL": 8.5, "IQ4_XS": 8.5}
GRID_ROW_BYTES = {"Q4_K": 1.25, "Q6_K": 1.25, "Q8_0": 1.125}            # bytes a value of a GridMatrix
FORMAT_BYTES = {"fp32": 4.0, "bf16": 2.0, "int8": 1.0}


class ModelDoesNotFitError(MemoryError):
    """The model would not fit in the memory this machine has free; the message gives both and what to change."""


@dataclass(frozen=True)
class Need:
    weights: int      # resident once loaded
    transient: int    # on top of it while the largest tensor is converted
    kv: int           # the KV cache
    runtime: int = RUNTIME_BYTES

    @property
    def peak(self) -> int:
        return self.weights + self.transient + self.kv + self.runtime

    def describe(self) -> str:
        gb = lambda n: f"{n / 1e9:.1f} GB"   # noqa: E731
        return (f"{gb(self.peak)} (weights {gb(self.weights)}, KV cache {gb(self.kv)}, conversion "
                f"{gb(self.transient)}, runtime {gb(self.runtime)})")


def weight_bytes(qtype: str, fmt: str, numel: int, vnni: bool) -> float:
    """Bytes a projection of `numel` weights of GGUF type `qtype` (or "F32" for float sources) takes in `fmt`."""
    if fmt in FORMAT_BYTES:
        return FORMAT_BYTES[fmt] * numel
    if qtype in FOUR_BIT_BLOCKS:
        return FOUR_BIT_BLOCKS[qtype] / 8 * numel
    if vnni and qtype in EIGHT_BIT_BLOCKS:
        return EIGHT_BIT_BLOCKS[qtype] / 8 * numel
    if qtype in ("Q8_0", "Q5_0", "Q5_1", "Q5_K"):      # blocks of 32 as two 4-bit halves (split_nibbles)
        return 10 / 8 * numel
    return 1.0 * numel                                  # int8 per output channel


def estimate(tensors: Any, config: Any, plan: Any, kv_bytes: int, vnni: bool) -> Need:
    """What loading `tensors` (a GGUFTensors, or a dict of float32 tensors) under `plan` will take."""
    grids = hasattr(tensors, "grid")
    total, largest, table = 0.0, 0, 0
    formats = {plan.small, plan.large}
    for name in tensors:
        shape = tensors.shape(name) if grids else tuple(tensors[name].shape)
        numel = tensors.numel(name) if grids else tensors[name].numel()
        qtype = tensors.qtype(name) if grids else "F32"
        if not grids:
            total += 4 * numel              # the float32 dict itself stays alive while the model is built
        if len(shape) != 2:
            total += 4 * numel
            continue
        head = name == "output.weight" or (name == "token_embd.weight" and config.tie_word_embeddings)
        if name in ("token_embd.weight", "output.weight"):
            if name == "output.weight" and config.tie_word_embeddings:
                continue
            table = max(table, numel)
            rows = GRID_ROW_BYTES.get(qtype, 4.0) if grids else 0.0
            total += rows * numel
            if head:
                small = plan.small
                total += (5 / 8 if small in ("w4a8", "w4a16", "int4") else FORMAT_BYTES.get(small, 1.0)) * numel
                if plan.large != plan.small:
                    total += weight_bytes(qtype, plan.large, numel, vnni)
            continue
        largest = max(largest, numel)
        total += sum(weight_bytes(qtype, f, numel, vnni) for f in formats)
    # a projection's float32 copy, grid and packing buffers; the embedding's grid while its head is packed
    return Need(int(total), max(8 * largest, 2 * table), int(kv_bytes))


def kv_bytes(config: Any, act_dtype: Any, kv_cache_dtype: str, max_total_tokens: int | None,
             kv_cache_bytes: int, max_running_requests: int, max_context: int | None) -> int:
    """The KV pool's bytes as EngineCore sizes it (engine/core.py)."""
    from .kv_pool import KVPool

    per_slot = KVPool.token_bytes(config.num_layers, config.num_kv_heads, config.head_dim, act_dtype, kv_cache_dtype)
    if max_total_tokens is not None:
        return (max_total_tokens + 1) * per_slot
    ctx = min(max_context or config.max_context, config.max_context)
    return min(max_running_requests * ctx + 1, kv_cache_bytes // per_slot) * per_slot


def available_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, or less under a cgroup limit; None where unknown."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    for limit, used in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap = Path(limit).read_text().strip()
            if cap != "max" and int(cap) < 1 << 60:
                room = int(cap) - int(Path(used).read_text().strip())
                avail = room if avail is None else min(avail, room)
            break
        except (OSError, ValueError):
            continue
    override = os.environ.get("SGLITE_MEMORY_AVAILABLE")   # for tests and for machines that misreport it
    if override:
        avail = int(float(override))
    return avail


def check_fits(need: Need, path: Any, plan: Any, available: int | None = None) -> None:
    """Raises ModelDoesNotFitError when `need` exceeds the available memory (nothing when it is unknown)."""
    available = available_bytes() if available is None else available
    if available is None or need.peak <= available:
        return
    hints = []
    if plan.small != plan.large:
        hints.append(f"weights={plan.small!r} (one format for decode and prefill, no {plan.large} copy)")
    if need.kv > 256_000_000:
        hints.append("a smaller KV cache (max_total_tokens / kv_cache_bytes, or kv_cache_dtype='int8')")
    hints.append("a smaller quantization of the model file (llama-quantize ... Q4_K_M, or a smaller model)")
    raise ModelDoesNotFitError(f"{Path(str(path)).name} needs about {need.describe()} under weights {plan}, and "
                               f"this machine has {available / 1e9:.1f} GB available; try " + ", or ".join(hints))
