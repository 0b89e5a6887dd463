"""C kernels compiled on the machine they run on: `build(source, march)` compiles a C file next to this one with the
system C compiler (`$CC`, else `cc`), `-O3 -fopenmp -march=<march>` and the source's own extra flags, caches the
shared library in `$SGLITE_CACHE` (default `~/.cache/sglite`) / `kernels/`, keyed by the source and the headers it
includes (`#include "native.h"`: the ISA macros, conversions and activation quantizer the kernels share; quoted
includes resolve next to the source), the compiler, the flags and the CPU's flags, and loads it with ctypes.
`SGLITE_NATIVE_KERNELS=0` turns every native kernel off; `SGLITE_NATIVE_MARCH` builds them for another `-march`
than this CPU's (e.g. `x86-64-v3`, the AVX2 path).

Each kernel module (w4a8_cpu.py, w8a8_cpu.py, decode_attention_cpu.py) keeps one `NativeLibrary`: built at first
use, on one thread, with the reason kept when it cannot be (no compiler, a failed compile), so callers fall back
and say why. kernels/registry.py reads every kernel's state from these.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable

log = logging.getLogger("sglite.kernels")

FLAGS = ("-O3", "-fopenmp", "-fPIC", "-shared", "-std=c11")


def cpu_flags_line() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _compiler_version(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else ""


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def local_includes(source: Path) -> list[Path]:
    """The files `source` includes with quotes, and theirs, each once in first-seen order (each resolved next to
    the file that includes it, as the compiler does first)."""
    seen: list[Path] = []
    todo = [source]
    while todo:
        including = todo.pop(0)
        for name in _INCLUDE.findall(including.read_bytes()):
            path = (including.parent / name.decode()).resolve()
            if path not in seen and path.exists():
                seen.append(path)
                todo.append(path)
    return seen


def build(source: Path, march: str = "native", extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Compile (or find in the cache) and load `source` for `-march=<march>` ("native": this CPU's best; tests
    also build "x86-64", the portable path). The library's `build_id` attribute is its cache key. Raises
    OSError/RuntimeError saying what failed."""
    flags = [*FLAGS, *extra_flags, f"-march={march}"]
    cc = os.environ.get("CC") or "cc"
    try:
        version = _compiler_version(cc)
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"no C compiler ({cc}): {e}") from None
    texts = [source.read_bytes()] + [h.read_bytes() for h in local_includes(source)]
    key = hashlib.sha256(b"\0".join([*texts, version.encode(), " ".join(flags).encode(),
                                     cpu_flags_line().encode()])).hexdigest()[:16]
    cache = Path(os.environ.get("SGLITE_CACHE") or Path.home() / ".cache" / "sglite") / "kernels"
    lib_path = cache / f"{source.stem}-{key}.so"
    if not lib_path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
        try:
            out = subprocess.run([cc, *flags, "-o", tmp, str(source), "-lm"], capture_output=True, text=True,
                                 timeout=300)
            if out.returncode != 0:
                raise RuntimeError(f"{cc} failed on {source.name}: {out.stderr.strip()[-2000:]}")
            os.replace(tmp, lib_path)       # atomic: other processes see the whole library or none
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    # torch is loaded first (the kernel modules import it), so the library's libgomp resolves to torch's: one
    # OpenMP runtime
    lib = ctypes.CDLL(str(lib_path))
    lib.build_id = key
    return lib


class NativeLibrary:
    """One C kernel's library, built on first use (thread-safe); `load()` is None when it cannot be, and
    `unavailable_reason()` then says why. `declare(lib)` sets the functions' ctypes signatures; `isa_symbol`, if
    given, names the library's `const char *f(void)` that says which ISA path the build takes (logged once, at
    info level, and given by `isa()`)."""

    def __init__(self, source: Path, declare: Callable[[ctypes.CDLL], None], extra_flags: tuple[str, ...] = (),
                 isa_symbol: str | None = None):
        self.source, self.declare, self.extra_flags, self.isa_symbol = source, declare, extra_flags, isa_symbol
        self._lock = threading.Lock()
        self._lib: ctypes.CDLL | None = None
        self._done = False
        self.why: str | None = None

    def build(self, march: str | None = None) -> ctypes.CDLL:
        """A fresh build for `march` (uncached in this object; raises as native.build does)."""
        lib = build(self.source, march or os.environ.get("SGLITE_NATIVE_MARCH") or "native", self.extra_flags)
        if self.isa_symbol is not None:
            getattr(lib, self.isa_symbol).restype = ctypes.c_char_p
        self.declare(lib)
        return lib

    def load(self) -> ctypes.CDLL | None:
        if not self._done:
            with self._lock:
                if not self._done:
                    if os.environ.get("SGLITE_NATIVE_KERNELS", "1") == "0":
                        self.why = "SGLITE_NATIVE_KERNELS=0"
                    else:
                        try:
                            self._lib = self.build()
                            if self.isa_symbol is not None:
                                log.info("%s kernel: %s", self.source.stem, self._isa(self._lib))
                        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                            self.why = str(e)
                            log.warning("%s kernel unavailable: %s", self.source.stem, e)
                    self._done = True
        return self._lib

    @property
    def probed(self) -> bool:
        """Whether load() has run (built the library or found why not); reading this builds nothing."""
        return self._done

    def available(self) -> bool:
        return self.load() is not None

    def unavailable_reason(self) -> str | None:
        return None if self.available() else str(self.why)

    def _isa(self, lib: ctypes.CDLL) -> str:
        return getattr(lib, self.isa_symbol)().decode()

    def isa(self) -> str | None:
        """The ISA path the loaded build takes ("avx512_vnni", "avx2", "scalar"...); None when unavailable."""
        lib = self.load()
        return None if lib is None or self.isa_symbol is None else self._isa(lib)

    def build_id(self) -> str | None:
        """Which build is loaded (a hash of the source, its headers, the compiler, flags and CPU), for caches of
        what was measured with it; None when unavailable."""
        lib = self.load()
        return None if lib is None else lib.build_id
