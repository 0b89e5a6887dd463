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

from .errors import SetupError
from .inputs import id_key

MODES = ("new", "resume", "overwrite")


class ResultLog:
    """Opened by `ResultLog.open`; `done` maps id_key(id) -> the lines already in the file (resume)."""

    def __init__(self, path: Path, fd: int, done: dict[str, dict], dropped_tail: int):
        self.path = path
        self._fd = fd
        self.done = done
        self.dropped_tail = dropped_tail   # bytes of a cut-off last line removed on resume (0: none)

    @classmethod
    def open(cls, path: Path, mode: str = "new") -> "ResultLog":
        """Open `path` for appending. mode "new": it must be absent or empty; "resume": read the lines it holds
        (and cut off a partial last line); "overwrite": empty it. Raises SetupError for anything that would
        otherwise fail only after the documents ran (missing directory, no permission, a directory)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if path.is_dir():
            raise SetupError(f"--output {path} is a directory; give a file name")
        if not path.parent.is_dir():
            raise SetupError(f"--output {path}: directory {path.parent} does not exist; create it first")
        existing = path.read_bytes() if path.is_file() and mode != "overwrite" else b""
        if existing and mode == "new":
            raise SetupError(f"--output {path} already holds results; pass --resume to skip the documents it "
                             "holds, or --overwrite to replace it")
        done, keep = _parse(path, existing)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if mode == "overwrite" else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            raise SetupError(f"--output {path}: cannot write ({e.strerror or e})") from None
        if keep < len(existing):
            os.truncate(fd, keep)
        return cls(path, fd, done, len(existing) - keep)

    def append(self, line: dict[str, Any]) -> None:
        """Write one result line (and nothing else) at the end of the file."""
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
