"""What one grammar compile may spend: a time budget and a size budget, set around each compile by
GrammarCompiler and checked where compile work grows (automaton states, schema nodes, a regex's counted
repetitions before they are unrolled). Over budget is a CompileBudgetExceeded (a GrammarError, so an HTTP 400)
naming the construct, raised within the time budget, so that no request can hold a compile worker for long.

The budget is per thread: `within(budget)` sets it for the calls below it, `checkpoint(where)` reads it. Code
that runs outside any compile (tests of one automaton, say) has no budget and is never stopped.

A compile is also cancellable: `cancellable(event)` makes every checkpoint below it raise CompileCancelled once
the event is set (the request was aborted or its client went away), so the worker is freed at the next
checkpoint instead of at the end of the budget.

A compile is pure Python on a worker thread beside the engine's step loop, and holds the GIL: the loop, which
takes the GIL back after each of its torch ops, waits for the holder to reach the interpreter's switch interval
(5 ms by default) each time, so a decode step beside a busy compile took several times its length. While any
compile runs under a budget, the process's switch interval is lowered to `CompileBudget.switch_interval_s`
(sys.setswitchinterval) and put back when the last one ends: the loop then waits a tenth as long per op. This
is the one process-wide effect of a compile; `switch_interval_s=None` leaves the interval alone."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from ..defaults import GRAMMAR_COMPILE_BUDGET_S
from .errors import GrammarError


@dataclass(frozen=True)
class CompileBudget:
    seconds: float = GRAMMAR_COMPILE_BUDGET_S   # wall time of one compile, first mask included
    regex_positions: int = 2048     # a regex's size as written, each counted repetition once (regex_size.py)
    schema_values: int = 5000       # JSON values in one schema, enum members and subschemas alike (schema/size.py)
    switch_interval_s: float | None = 0.0005   # the GIL switch interval while compiles run (None: unchanged)

    def __post_init__(self) -> None:
        if not (isinstance(self.seconds, (int, float)) and self.seconds > 0):
            raise ValueError(f"CompileBudget.seconds must be > 0, got {self.seconds!r}")
        for name in ("regex_positions", "schema_values"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"CompileBudget.{name} must be an int > 0, got {value!r}")
        s = self.switch_interval_s
        if s is not None and not (isinstance(s, (int, float)) and not isinstance(s, bool) and 0 < s <= 0.1):
            raise ValueError(f"CompileBudget.switch_interval_s must be None or in (0, 0.1] seconds, got {s!r}")


class CompileBudgetExceeded(GrammarError):
    """A compile that would pass its time or size budget; the message names the construct and the budget."""


class CompileCancelled(Exception):
    """A compile stopped because its request was aborted; nobody waits for its result."""


_local = threading.local()


class _SwitchInterval:
    """The process's GIL switch interval, lowered while at least one compile runs: the compiles running now
    (every thread's), and the interval to put back when the last ends (None: it was not lowered)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.saved: float | None = None

    def enter(self, seconds: float | None) -> bool:
        """Counts a compile in; lowers the interval to `seconds` if that is lower. False (nothing to undo)
        for None."""
        if seconds is None:
            return False
        with self.lock:
            self.running += 1
            now = sys.getswitchinterval()
            if seconds < now:
                if self.saved is None:
                    self.saved = now
                sys.setswitchinterval(seconds)
        return True

    def leave(self) -> None:
        with self.lock:
            self.running -= 1
            if self.running == 0 and self.saved is not None:
                sys.setswitchinterval(self.saved)
                self.saved = None


_switch = _SwitchInterval()


@contextmanager
def within(budget: CompileBudget | None) -> Iterator[None]:
    """Runs the block under `budget` (None: no budget). A compile nested in another (a structural tag's schema)
    keeps the earlier deadline. The outermost lowers the GIL switch interval while it runs (see the module's
    docstring)."""
    saved = (getattr(_local, "budget", None), getattr(_local, "deadline", None))
    outermost = getattr(_local, "memo", None) is None
    if outermost:
        _local.memo = {}
    lowered = False
    if budget is not None:
        deadline = time.monotonic() + budget.seconds
        _local.budget = budget
        _local.deadline = deadline if saved[1] is None else min(deadline, saved[1])
        lowered = saved[1] is None and _switch.enter(budget.switch_interval_s)
    try:
        yield
    finally:
        _local.budget, _local.deadline = saved
        if outermost:
            _local.memo = None
        if lowered:
            _switch.leave()


def current() -> CompileBudget | None:
    return getattr(_local, "budget", None)


def memo(key, build):
    """`build()`, made once per key within one compile (the outermost `within` block; outside one, every
    call builds): a pattern read at several places of one schema is parsed once. Nothing outlives the
    compile, so this is no cache beside the budgeted ones (cache.py)."""
    table = getattr(_local, "memo", None)
    if table is None:
        return build()
    hit = table.get(key)
    if hit is None:
        hit = table[key] = build()
    return hit


@contextmanager
def cancellable(cancel: threading.Event | None) -> Iterator[None]:
    """Runs the block so that its checkpoints raise CompileCancelled once `cancel` is set (None: not
    cancellable)."""
    saved = getattr(_local, "cancel", None)
    _local.cancel = cancel
    try:
        yield
    finally:
        _local.cancel = saved


def checkpoint(where: str) -> None:
    """Raises CompileCancelled once this thread's compile is cancelled, CompileBudgetExceeded once it has run
    past its time budget."""
    cancel = getattr(_local, "cancel", None)
    if cancel is not None and cancel.is_set():
        raise CompileCancelled(f"{where}: the compile was cancelled")
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise CompileBudgetExceeded(f"{where}: the grammar takes longer than its compile budget of "
                                    f"{_local.budget.seconds:g} s; simplify it (smaller counts or fewer "
                                    f"alternatives) or raise the budget")
