"""Explicit wiring: a program state holds a worker thread only while it has nodes to run (no __del__ needed for
unjoined fork branches), a Runtime registers no exit hook, and the default runtime the library creates itself
is logged and is the one thing shut down at exit."""
from __future__ import annotations

import atexit
import importlib
import logging
import threading
import time

import sglite as sgl

from .fake_engine import FakeEngine


def _program_threads() -> int:
    return sum(t.name == "sglite-program" for t in threading.enumerate())


def _wait_no_program_threads(timeout: float = 2.0) -> int:
    end = time.monotonic() + timeout
    while _program_threads() and time.monotonic() < end:
        time.sleep(0.01)
    return _program_threads()


def test_idle_and_unjoined_states_hold_no_thread():
    be = sgl.Runtime(engine=FakeEngine(latency=0.05))

    @sgl.function
    def prog(s):
        s += "Topic: tea\n"
        forks = s.fork(3)
        forks += sgl.gen("idea", max_tokens=4)   # never joined
        return forks

    s = prog.run(backend=be)
    assert [f["idea"] for f in s.ret_value] == ["ok"] * 3
    assert _wait_no_program_threads() == 0
    s += "more"   # a state that ended runs later nodes inline
    assert s.text().endswith("more") and _program_threads() == 0


def test_runtime_registers_no_exit_hook_and_the_default_is_logged(monkeypatch, caplog):
    runtime_mod = importlib.import_module("sglite.backend.runtime")
    default_mod = importlib.import_module("sglite.lang.default_backend")

    registered = []
    monkeypatch.setattr(atexit, "register", lambda f, *a, **k: registered.append(f))
    rt = sgl.Runtime(engine=FakeEngine())
    assert registered == []

    class DefaultRuntime(runtime_mod.Runtime):
        def __init__(self):
            super().__init__(engine=FakeEngine())

    monkeypatch.setattr(runtime_mod, "Runtime", DefaultRuntime)
    monkeypatch.setattr(default_mod, "_default_backend", None)
    with caplog.at_level(logging.WARNING, logger="sglite"):
        default = sgl.get_default_backend()
    assert isinstance(default, DefaultRuntime) and sgl.get_default_backend() is default
    assert registered == [default.shutdown] and "no backend set" in caplog.text
    rt.shutdown()
