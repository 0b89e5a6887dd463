"""How `sglite extract` and `sglite batch` stop: exit statuses, SIGTERM turned into the same orderly stop as
Ctrl-C, and an output file that refuses a line (a full disk) reported as such rather than as a traceback."""
from __future__ import annotations

import signal
from typing import Any

from .output import ResultLog

EXIT_WRITE_FAILED = 3
EXIT_INTERRUPTED = 130   # 128 + SIGINT
EXIT_TERMINATED = 143    # 128 + SIGTERM


class WriteFailed(Exception):
    """The output file refused a line (OSError: a full disk, a file system gone read-only)."""


def append_line(log: ResultLog, line: dict) -> None:
    try:
        log.append(line)
    except OSError as e:
        raise WriteFailed(e.strerror or str(e)) from e


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the job stops as it does on Ctrl-C."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def install_sigterm() -> Any:
    """SIGTERM stops the job as Ctrl-C does (the old handler is returned; None off the main thread)."""
    try:
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:   # not the main thread (an embedding caller's worker): leave signals alone
        return None


def stopped_by(e: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"


def interrupted_status(e: BaseException) -> int:
    return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
