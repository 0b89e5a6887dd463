"""ResultLog: the output JSONL, one whole line appended per finished document.

Each line is written with unbuffered appends and no later rewrite, so a crash, `kill -9` or Ctrl-C loses
nothing already written (the page cache holds it; a power cut can still lose the last lines, as nothing is
fsynced). The only damage a kill can do is a last line cut short: resuming detects it (no final newline),
cuts it off and runs that document again."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .setup_error import SetupError
from .inputs import id_key

MODES = ("new", "resume", "overwrite")


class ResultLog:
    """`ResultLog.open` checks and reads the file, changing nothing; `begin()` opens it for appending.
    `done` maps id_key(id) -> the lines already in the file (resume)."""

    def __init__(self, path: Path, mode: str, done: dict[str, dict], keep: int, size: int):
        self.path = path
        self.mode = mode
        self.done = done
        self._keep = keep                  # bytes to keep: up to the last newline ("resume"), 0 ("overwrite")
        self.dropped_tail = size - keep if mode == "resume" else 0   # a cut-off last line's bytes (0: none)
        self._fd = -1

    @classmethod
    def open(cls, path: Path, mode: str = "new") -> "ResultLog":
        """Check `path` for the job. mode "new": it must be absent or empty; "resume": read the lines it holds
        (a partial last line is cut off in begin()); "overwrite": begin() empties it. Raises SetupError for what
        would otherwise fail only after the documents ran (a missing directory, no permission, a directory)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if path.is_dir():
            raise SetupError(f"--output {path} is a directory; give a file name")
        if not path.parent.is_dir():
            raise SetupError(f"--output {path}: directory {path.parent} does not exist; create it first")
        exists = path.exists()
        if not os.access(path if exists else path.parent, os.W_OK):
            raise SetupError(f"--output {path}: no permission to write {'it' if exists else path.parent}")
        existing = path.read_bytes() if exists and mode != "overwrite" else b""
        if existing and mode == "new":
            raise SetupError(f"--output {path} already holds results; pass --resume to skip the documents it "
                             "holds, or --overwrite to replace it")
        done, keep = _parse(path, existing)
        return cls(path, mode, done, keep, len(existing))

    def begin(self) -> None:
        """Open the file for appending (creating it), once every check has passed and before the first append;
        cuts off a partial last line ("resume") or everything ("overwrite")."""
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise SetupError(f"--output {self.path}: cannot write ({e.strerror or e})") from None
        if self.mode != "new":
            os.truncate(self._fd, self._keep)

    def append(self, line: dict[str, Any]) -> None:
        """Write one result line (and nothing else) at the end of the file."""
        if self._fd < 0:
            raise RuntimeError("ResultLog.append before begin()")
        data = memoryview((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data):]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "ResultLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _parse(path: Path, data: bytes) -> tuple[dict[str, dict], int]:
    """The complete lines of `data` by id key, and how many leading bytes to keep (up to the last newline)."""
    keep = data.rfind(b"\n") + 1
    done: dict[str, dict] = {}
    for n, raw in enumerate(data[:keep].splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            line = None
        if not isinstance(line, dict) or "id" not in line:
            raise SetupError(f"--output {path}:{n}: not a result line of sglite extract; remove that line, or "
                             "pass --overwrite to start again")
        done[id_key(line["id"])] = line
    return done, keep
