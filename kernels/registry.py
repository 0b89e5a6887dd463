"""Which kernel each op runs on this machine, and why not where one cannot: one table of every kernel module in
kernels/, read by the runtime when it chooses a backend (once, at construction), given in the engine's
get_stats()["kernels"], and printed by `python -m sglite.kernels.registry` (`--no-build`: compile nothing).

    use(name) -> bool                  whether the runtime runs kernel `name` for its op here
    status(name) -> KernelStatus       its row: available, use, why not, ISA path, build
    describe(probe=True) -> [KernelStatus]   every kernel's row; probe=False compiles nothing (a C kernel not
                                       built yet says so), for stats read while serving
    table(rows) -> str                 the rows as a printed table
    KERNELS                            name -> Kernel: what each computes, on what, and what runs without it

A row's reasons, in the order they are checked: the backend's dependency (numba or triton importable), then the
kernel module's own probe (a C kernel's: SGLITE_NATIVE_KERNELS=0, or its compile failure, kernels/native.py),
then the ISA path the runtime wants it on (w8a8_cpu: AVX-512 VNNI only; a missing CPU flag is named). The
modules' probes stay the authority: the registry reads them on every call and keeps nothing, so it always
agrees with them (and a test that patches a module's probe patches the registry's answer). Importing this
module imports no kernel, torch or numba; a row imports its kernel's module.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple

from .native import cpu_flags_line

# flags (as /proc/cpuinfo names them) of each ISA path a C kernel may build, best first; native.h's macros
_PATH_FLAGS = {
    "avx512_vnni": ("avx512f", "avx512bw", "avx512_vnni"),
    "avx512_bf16": ("avx512f", "avx512_bf16"),
    "avx512": ("avx512f",),
    "avx2": ("avx2", "fma", "f16c"),
}


@dataclass(frozen=True)
class Kernel:
    name: str                                  # its module under kernels/
    op: str                                    # what it computes
    backend: str                               # "c" (compiled here by native.py), "numba", "triton"
    fallback: str                              # what runs where it is not used
    paths: tuple[str, ...] = ()                # C: the ISA paths its source has, best first (last: plain C)
    use_on: tuple[str, ...] | None = None      # C: the paths the runtime uses it on (None: any)

    def predicted_path(self, flags: frozenset[str]) -> str:
        """The path a `-march=native` build takes on a CPU with these flags (C kernels)."""
        return next(p for p in self.paths if set(_PATH_FLAGS.get(p, ())) <= flags)


class KernelStatus(NamedTuple):
    name: str
    op: str
    backend: str
    available: bool | None   # the module's own probe; None: a C kernel not built yet (describe(probe=False))
    use: bool                # available, and on a path the runtime uses it on
    why: str | None          # why it is not used (None when it is)
    isa: str | None          # the path it runs: a C build's ("avx512_vnni", "avx2", "scalar"...), "numba", "triton"
    build: str | None        # a C build's hash (kernels/native.py), for caches of what was measured with it


KERNELS: dict[str, Kernel] = {k.name: k for k in (
    Kernel("w4a8_cpu", "matmul: 4-bit block weights x int8 activations (formats w4a16, w4a8)", "c",
           "torch's int4 matmul (w4a16 and w4a8 are refused)", ("avx512_vnni", "avx2", "scalar")),
    Kernel("w8a8_cpu", "matmul: 8-bit block weights (Q8_0, Q6_K...) x int8 activations", "c",
           "w4a8_cpu over the weights' nibbles (blocks of 32), else int8", ("avx512_vnni", "scalar"),
           use_on=("avx512_vnni",)),
    Kernel("decode_attention_cpu", "paged decode attention on the CPU (a C kernel, called through numba)", "numba",
           "gather + torch SDPA", ("avx512_bf16", "avx512", "avx2", "generic")),
    Kernel("layer_ops_cpu", "a decoder layer's small ops fused (bfloat16 activations)", "numba", "torch's ops"),
    Kernel("head_refine_cpu", "output head: exact top-k refinement of bf16 logits", "numba", "torch's ops"),
    Kernel("kv_quant_cpu", "quantize new K/V into a one-byte KV pool", "numba", "torch's ops"),
    Kernel("trie_walk_cpu", "token classification: one walk over the vocabulary trie", "numba",
           "Python's depth-first walk"),
    Kernel("decode_attention", "paged decode attention, split-KV (GPU)", "triton", "attention_backend='torch'"),
    Kernel("extend_attention", "prefill attention over a cached prefix (GPU)", "triton", "attention_backend='torch'"),
    Kernel("kv_store", "write new K/V into the paged pool (GPU)", "triton", "attention_backend='torch'"),
    Kernel("token_mask", "apply a packed token bitmask to logits (CUDA)", "triton", "its torch reference"),
)}

# modules under kernels/ that are not kernels: the build, the shared halves of two kernels, this table
SUPPORT_MODULES = frozenset({"native", "block_gemm", "registry"})


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's flags (/proc/cpuinfo; empty where it has none)."""
    return frozenset(cpu_flags_line().partition(":")[2].split())


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{name}")


def _dependency_missing(backend: str) -> str | None:
    if backend in ("numba", "triton") and importlib.util.find_spec(backend) is None:
        return f"{backend} is not installed"
    return None


def _c_status(k: Kernel, probe: bool) -> tuple[bool | None, str | None, str | None, str | None]:
    """(available, why unavailable, isa, build) of a C kernel, from its module's probe."""
    mod = _module(k.name)
    if not probe and not mod._NATIVE.probed:
        if os.environ.get("SGLITE_NATIVE_KERNELS", "1") == "0":
            return False, "SGLITE_NATIVE_KERNELS=0", None, None
        march = os.environ.get("SGLITE_NATIVE_MARCH")
        return None, "not built yet (built at first use)", f"-march={march}" if march else \
            k.predicted_path(cpu_flags()), None
    why = mod.unavailable_reason()
    if why is not None:
        return False, why, None, None
    return True, None, mod.isa(), mod.build_id()


def status(name: str, probe: bool = True) -> KernelStatus:
    """Kernel `name`'s row. probe: run its module's probe (a C kernel is compiled on the first ask, then cached
    on disk); without it, a C kernel not built yet reports available None and the path its build would take."""
    if name not in KERNELS:
        raise KeyError(f"no kernel {name!r} in kernels/registry.py; known: {', '.join(KERNELS)}")
    k = KERNELS[name]
    build = None
    if (why := _dependency_missing(k.backend)) is not None:
        available, isa = False, None
    elif k.backend == "c":
        available, why, isa, build = _c_status(k, probe)
    elif k.backend == "triton":
        available, isa = True, "triton (CUDA, or the CPU under TRITON_INTERPRET=1)"
    else:
        mod = _module(name)
        available = mod.available()
        why = None if available else f"{k.backend} cannot be imported"
        isa = k.backend
        if available and name == "decode_attention_cpu":   # its C kernel where that builds, else numba's
            if probe or mod._NATIVE.probed:
                isa = f"c:{c_isa}" if (c_isa := mod.native_isa()) else "numba"
            else:
                isa = "c or numba (C not built yet)"
    use = bool(available) and (k.use_on is None or isa in k.use_on)
    if available is not False and k.use_on is not None and isa not in k.use_on:
        missing = [f for f in _PATH_FLAGS[k.use_on[0]] if f not in cpu_flags()]
        why = f"used on {'/'.join(k.use_on)} only: " + (f"the CPU lacks {', '.join(missing)}" if missing else
                                                         f"this build takes {isa}")
    return KernelStatus(name, k.op, k.backend, available, use, why, isa, build)


def use(name: str) -> bool:
    """Whether the runtime runs kernel `name` for its op on this machine (status(name).use)."""
    return status(name).use


def describe(probe: bool = True) -> list[KernelStatus]:
    """Every kernel's row, in KERNELS' order."""
    return [status(name, probe) for name in KERNELS]


def table(rows: list[KernelStatus]) -> str:
    """The rows as a fixed-width table: kernel, backend, available, used, ISA path, why not."""
    cells = [("kernel", "backend", "available", "used", "isa", "why not")] + [
        (r.name, r.backend, "?" if r.available is None else "yes" if r.available else "no",
         "yes" if r.use else "no", r.isa or "-", r.why or "") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(5)) + "  " + c[5] for c in cells)


if __name__ == "__main__":
    print(table(describe(probe="--no-build" not in sys.argv[1:])))
