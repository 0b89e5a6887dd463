"""CPU threading facts the engine acts on.

torch runs its parallel ops on OpenMP (libgomp). Each thread that runs a parallel op gets its own OpenMP pool
of worker threads, kept for later regions. Once the pools hold more threads than there are cores, libgomp stops
letting idle workers spin and puts them to sleep, and each parallel op then pays a wake-up (measured here:
a 576x3072 bf16 projection took 163 us on the engine's loop thread instead of 100 us on the main thread, on
2 cores). Loading a model on the caller's thread and then stepping on the loop thread is exactly that case, so
the engine releases the caller's pool before its loop starts.
"""
from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("sglite.runtime")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def release_openmp_pool() -> bool:
    """Frees the calling thread's OpenMP worker threads in every libgomp the process has loaded (torch's, and
    numba's own copy when its kernels run in parallel) with OpenMP 5 `omp_pause_resource_all` (soft pause); a
    later parallel op on this thread makes a new pool. False when no libgomp is found or none could be paused
    (nothing is changed then)."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "libgomp" in line and line.split()[-1].startswith("/")})
    except OSError:
        return False
    released = False
    for path in libs:
        try:
            pause = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        released |= pause(1) == 0   # 1 = omp_pause_soft
    if not released:
        log.debug("could not release the OpenMP pool (libgomp not found)")
    return released
