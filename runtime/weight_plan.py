"""Which weight format a model runs in: `WeightPlan`, and `choose_weight_plan`, which measures this machine.

A plan names a format for decode rows (few per pass, bound by reading the weights) and one for prefill rows
(many per pass, bound by arithmetic); each request's tokens go through the format of their phase whatever shares
the batch, so greedy outputs do not depend on batch composition. `"auto"` checks the CPU's features and times
matmuls of the model's own shapes in each format (about three seconds), once per machine, thread count, model
shape and build of the CPU kernels (kernel_builds): the result is cached in `$SGLITE_CACHE` (default
`~/.cache/sglite`) / `weight_plans_v3.json`. Nothing is assumed from flags alone where the machine can be
measured: an AVX2-only CPU emulates bf16 and loses, and the measurement shows it.

The plan is a stable function of the machine and the model, decided once and kept: every process reads the cached
choice, and the first one to decide holds a lock on the cache while it does, so concurrent processes wait for its
answer instead of timing the machine against each other. On a busy machine (the load average above the cores
less half a core) timings mislead, 2-thread ones most (each OpenMP barrier waits for a core), so none are taken:
the plan then follows from the CPU's flags alone (`rule_weight_plan`) and is kept the same way. Delete the cache
file to measure again. A job that must reproduce its outputs elsewhere (a resumed run, replicas) records
`str(plan)` and passes it back as `weights=`: a named plan is used as given, never measured.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from sglite.kernels import registry

from .linear import KERNEL_DIGITS, WEIGHT_FORMATS, activation_dtype, make_linear
from .threads import usable_cores

log = logging.getLogger("sglite.runtime")

# Formats that pass the fidelity gate on the default model (tests/runtime/test_fidelity.py: teacher-forced
# top-1 agreement with fp32 >= 98%, mean KL <= 0.01 nats); "auto" picks only among these. int8 (one scale per
# output channel) fails it on SmolLM2's Q4_1 weights (95.7% top-1: a row-wide scale cannot hold weights that
# were quantized per group of 32), so it is offered only when asked for by name, as is w4a8 (96.7%: one int8
# digit per activation); w4a16 (two digits) passes at 99.0%. The kernel formats are candidates only where their
# kernel builds.
GATED_FORMATS = ("fp32", "bf16", "int4", "w4a16")
BENCH_ROWS = (1, 8, 32, 128)   # pass sizes the measurement times


@dataclass(frozen=True)
class WeightPlan:
    small: str = "fp32"          # format for decode rows (few per pass: reading the weights bounds them)
    large: str = "fp32"          # format for prefill rows (many per pass: arithmetic bounds them)

    def __post_init__(self) -> None:
        for key in ("small", "large"):
            if getattr(self, key) not in WEIGHT_FORMATS:
                raise ValueError(f"WeightPlan.{key} must be one of {WEIGHT_FORMATS}, got {getattr(self, key)!r}")
        if activation_dtype(self.small) != activation_dtype(self.large):
            raise ValueError(f"weight formats {self.small!r} and {self.large!r} need different activation "
                             "dtypes; fp32 pairs only with fp32")

    @property
    def act_dtype(self) -> torch.dtype:
        return activation_dtype(self.small)

    @classmethod
    def parse(cls, spec: "str | WeightPlan") -> "WeightPlan":
        """'int4' (one format) or 'int4+bf16' (decode rows + prefill rows)."""
        if isinstance(spec, WeightPlan):
            return spec
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"weights must be 'auto', one of {WEIGHT_FORMATS}, or 'SMALL+LARGE' such as "
                             f"'int4+bf16'; got {spec!r}")
        small, _, large = spec.partition("+")
        for fmt in (small, large or small):
            if fmt not in WEIGHT_FORMATS:
                raise ValueError(f"unknown weight format {fmt!r} in weights={spec!r}; choose 'auto', one of "
                                 f"{WEIGHT_FORMATS}, or 'SMALL+LARGE' such as 'int4+bf16'")
        return cls(small, large or small)

    def __str__(self) -> str:
        return self.small if self.small == self.large else f"{self.small}+{self.large}"


def cpu_flags() -> list[str]:
    """The CPU features that decide which formats can be fast (from /proc/cpuinfo; empty elsewhere)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_int8",
              "avx_vnni")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in wanted if f in have]
    return []


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_path() -> Path:
    return Path(os.environ.get("SGLITE_CACHE") or Path.home() / ".cache" / "sglite") / "weight_plans_v3.json"


def _time_formats(fmts: list[str], shapes: list[tuple[int, int]], rows: tuple[int, ...],
                  trials: int = 5) -> dict[str, dict[int, float]]:
    """Seconds per weight of one pass of each format at each row count, over distinct random matrices of
    `shapes` (enough of them that they do not all sit in cache, as a real model's weights do not). The formats
    take turns within every trial, so a burst of other work on a shared machine falls on all of them alike; each
    keeps its best of `trials` passes (other work only ever adds time)."""
    g = torch.Generator().manual_seed(0)

    def on_int4_grid(o: int, i: int) -> torch.Tensor:   # as a Q4_1 tensor is, so int4 stays int4
        q = torch.randint(0, 16, (o, i), generator=g)
        q[:, 0::32], q[:, 1::32] = 0, 15
        return q * 0.01 - 0.08

    sources = [on_int4_grid(o, i) for o, i in shapes]
    layers = {f: [make_linear(w, None, f) for w in sources] for f in fmts}
    n_params = sum(o * i for o, i in shapes)
    xs = {m: {i: torch.randn(m, i, generator=g) for _, i in shapes} for m in rows}
    inputs = {(m, dt): {i: v.to(dt) for i, v in xs[m].items()}                # each row count in each dtype
              for m in rows for dt in {activation_dtype(f) for f in fmts}}
    best = {f: {m: float("inf") for m in rows} for f in fmts}
    for trial in range(trials + 1):                             # trial 0 warms up
        for m in rows:
            for f in fmts:
                x = inputs[m, activation_dtype(f)]
                t0 = time.perf_counter()
                for layer in layers[f]:
                    layer(x[layer.in_features])
                if trial:
                    best[f][m] = min(best[f][m], time.perf_counter() - t0)
    return {f: {m: t / n_params for m, t in ts.items()} for f, ts in best.items()}


def _busy() -> float | None:
    """The 1-minute load average when it says other work holds the cores (timings then mislead), else None."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    return load if load > usable_cores() - 0.5 else None


def rule_weight_plan(flags: list[str], kernel: bool) -> WeightPlan:
    """The plan from the CPU's flags alone, for a machine too busy to time: 4-bit weights for decode rows (reading
    the weights bounds them on every CPU; the W4A8 kernel where it builds, else torch's int4), and bf16 for
    prefill rows where the CPU computes bf16 natively (AVX-512 BF16 or AMX), else the decode format."""
    small = "w4a16" if kernel else "int4"
    return WeightPlan(small, "bf16" if {"avx512_bf16", "amx_bf16"} & set(flags) else small)


def measure_weight_plan(hidden: int, intermediate: int, vocab: int) -> tuple[WeightPlan, dict]:
    """Time every gated format on this machine for the model's shapes: the decode format is the fastest per
    token over decode batches of 1, 8 and 32 rows, the prefill format the fastest at 128 rows."""
    per_layer = [(2 * intermediate, hidden), (hidden, intermediate), (hidden, hidden)]
    layer_params = sum(o * i for o, i in per_layer)
    copies = max(1, min(8, (48 << 20) // (4 * layer_params)))     # ~48 MB of fp32 weights
    shapes = per_layer * copies + [(min(vocab, 16384), hidden)]
    kernel = registry.status("w4a8_cpu").available
    candidates = [f for f in GATED_FORMATS if f not in KERNEL_DIGITS or kernel]
    with torch.inference_mode():
        times = _time_formats(candidates, shapes, BENCH_ROWS)
    # decode: time per token summed over decode batch sizes 1, 8 and 32 (batch 1's latency weighs most)
    small = min(candidates, key=lambda f: sum(times[f][m] / m for m in BENCH_ROWS[:-1]))
    # prefill shares the decode format's activation dtype (fp32 pairs only with itself)
    family = [f for f in candidates if activation_dtype(f) == activation_dtype(small)]
    large = min(family, key=lambda f: times[f][BENCH_ROWS[-1]])
    plan = WeightPlan(small, large)
    report = {fmt: {str(m): round(t * 1e12, 1) for m, t in ts.items()} for fmt, ts in times.items()}
    return plan, report   # report: picoseconds per weight per pass, by format and rows


def kernel_builds() -> str:
    """The builds of the CPU kernels the formats run on, as part of what a measured plan depends on: the W4A8
    kernel (w4a16 and w4a8 over 4-bit weights) and its 8-bit twin W8A8 (the same formats over weights on an
    8-bit block grid), each "isa:build" (a hash of its source, headers, compiler, flags and CPU) or "none" where
    it does not build (registry.status: no compiler, SGLITE_NATIVE_KERNELS=0). A rebuilt kernel, from a changed
    source, layout or compiler, gives another key, so the plan is decided anew."""
    def build(name: str) -> str:
        k = registry.status(f"{name}_cpu")
        return f"{name}:{k.isa}:{k.build}" if k.available else f"{name}:none"

    return ",".join([build("w4a8"), build("w8a8")])


def choose_weight_plan(spec: str, device: str | torch.device, hidden: int, intermediate: int, vocab: int,
                       ) -> WeightPlan:
    """The plan for `spec` ('auto', a format, or 'SMALL+LARGE') on `device`."""
    dev = torch.device(device)
    if spec != "auto":
        plan = WeightPlan.parse(spec)
        if dev.type != "cpu" and {plan.small, plan.large} - {"fp32", "bf16"}:
            raise ValueError(f"weights={spec!r}: int8, int4, w4a16 and w4a8 weights run on the CPU only; on "
                             f"{dev.type} use 'fp32' or 'bf16'")
        if {plan.small, plan.large} & set(KERNEL_DIGITS) and (why := registry.status("w4a8_cpu").why) is not None:
            raise ValueError(f"weights={spec!r}: the w4a8 CPU kernel is unavailable here ({why}); use 'int4'")
        return plan
    if dev.type != "cpu":
        return WeightPlan("fp32", "fp32")   # GPU formats are not measured yet: keep the reference
    key = "|".join([cpu_model(), ",".join(cpu_flags()), torch.__version__, str(torch.get_num_threads()),
                    f"{hidden}x{intermediate}x{vocab}", kernel_builds()])
    kernel = bool(registry.status("w4a8_cpu").available)
    path = _cache_path()
    cached = _read_cache(path).get(key)
    if cached is not None:
        return WeightPlan(cached["small"], cached["large"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")
    except OSError as e:
        log.warning("weights auto: cannot lock the plan cache in %s (%s); the plan from the CPU's flags is used",
                    path.parent, e)
        return rule_weight_plan(cpu_flags(), kernel)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # one process decides; the others wait and read its answer
        cache = _read_cache(path)
        if key in cache:
            return WeightPlan(cache[key]["small"], cache[key]["large"])
        busy = _busy()
        t0 = time.perf_counter()
        if busy is None:
            plan, report = measure_weight_plan(hidden, intermediate, vocab)
            busy = _busy()
        if busy is not None:        # timings taken under load (before or during the measurement) are not used
            plan, report = rule_weight_plan(cpu_flags(), kernel), {}
            log.warning("weights auto: the machine is busy (load average %.1f), so %s follows from the CPU's flags "
                        "(%s) without timings; it is kept in %s (delete it to measure on an idle machine)", busy,
                        plan, ",".join(cpu_flags()) or "none known", path)
        else:
            log.info("weights auto: chose %s (decode rows in %s, prefill rows in %s) in %.1f s; ps/weight by format "
                     "and rows: %s", plan, plan.small, plan.large, time.perf_counter() - t0, report)
        cache[key] = {"small": plan.small, "large": plan.large, "flags": cpu_flags(), "ps_per_weight": report,
                      "decided_by": "flags (busy machine)" if busy is not None else "timings"}
        try:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache, indent=1))
            tmp.replace(path)
        except OSError as e:
            log.warning("could not cache the weight plan in %s: %s", path, e)
    return plan


def _read_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
