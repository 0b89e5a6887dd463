"""While a compile runs under a budget, the GIL switch interval is lowered (CompileBudget.switch_interval_s), so
that the engine's loop, which takes the GIL back after each torch op, waits a tenth as long beside a compile; it
is put back when the last compile ends. The mechanism is checked here, untimed (bench/gil_compile.py times it)."""
from __future__ import annotations

import sys
import threading

import pytest

from sglite.protocol import SamplingParams
from sglite.runtime.constrained.budget import CompileBudget, CompileBudgetExceeded, within


@pytest.fixture(autouse=True)
def interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def test_lowered_while_a_compile_runs_and_put_back():
    with within(CompileBudget()):
        assert sys.getswitchinterval() == pytest.approx(CompileBudget().switch_interval_s)
        with within(CompileBudget(switch_interval_s=0.002)):      # nested: the outer compile's setting holds
            assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert sys.getswitchinterval() == pytest.approx(0.005)
    with within(CompileBudget(switch_interval_s=None)):
        assert sys.getswitchinterval() == pytest.approx(0.005)
    with within(None):
        assert sys.getswitchinterval() == pytest.approx(0.005)


def test_put_back_when_a_compile_fails():
    with pytest.raises(CompileBudgetExceeded), within(CompileBudget()):
        raise CompileBudgetExceeded("over")
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_put_back_only_when_the_last_of_concurrent_compiles_ends():
    entered, release = threading.Event(), threading.Event()

    def other():
        with within(CompileBudget()):
            entered.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with within(CompileBudget()):
        t.start()
        assert entered.wait(10)
    assert sys.getswitchinterval() == pytest.approx(0.0005)     # the other thread's compile still runs
    release.set()
    t.join(10)
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_a_higher_setting_never_raises_the_interval():
    sys.setswitchinterval(0.0001)
    low = sys.getswitchinterval()           # as the interpreter stores it (in whole microseconds)
    with within(CompileBudget(switch_interval_s=0.001)):
        assert sys.getswitchinterval() == low
    assert sys.getswitchinterval() == low


@pytest.mark.parametrize("bad", [0, -1.0, 0.5, True, "fast"])
def test_bad_settings_refused(bad):
    with pytest.raises(ValueError, match="switch_interval_s"):
        CompileBudget(switch_interval_s=bad)


def test_the_engines_compiles_run_lowered(tokenizer):
    from sglite.runtime.engine.grammar_backend import GrammarBackend

    backend = GrammarBackend(tokenizer)
    seen = []
    real = backend._compile

    def spy(compiler, kind, text):
        seen.append(sys.getswitchinterval())
        return real(compiler, kind, text)

    backend._compile = spy
    assert backend.compile(SamplingParams(json_schema='{"type": "integer"}'), rid="r1") is not None
    assert seen == [pytest.approx(0.0005)] and sys.getswitchinterval() == pytest.approx(0.005)
