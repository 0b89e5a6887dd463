"""ProgramResult: a finished program's state as plain data, so it can cross from a Ray replica to the driver.
It reads like a finished ProgramState (`s["name"]`, `get_meta_info`, `text()`, `messages()`, `variables()`,
`error()`), which is what `run_batch` hands back when its backend is a RayRuntime."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any


class ReplicaLost(RuntimeError):
    """A program or document whose replica died under it on every attempt (see Dispatcher.max_attempts)."""


@dataclass(frozen=True)
class ProgramResult:
    text_: str = ""
    variables_: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)   # variable name -> its gen's meta_info
    messages_: tuple[dict, ...] = ()
    error_: BaseException | None = None
    ret_value: Any = None

    @classmethod
    def from_state(cls, state: Any) -> "ProgramResult":
        """Snapshot a finished ProgramState (its variables, their meta_info, text, messages, error)."""
        variables = state.variables()
        meta = {name: state.get_meta_info(name) for name in variables}
        return cls(state.text(), variables, meta, tuple(state.messages()), _portable(state.error()),
                   _portable_value(getattr(state, "ret_value", None)))

    @classmethod
    def failed(cls, error: BaseException) -> "ProgramResult":
        return cls(error_=_portable(error))

    def __getitem__(self, name: str) -> Any:
        return self.variables_[name]

    def __contains__(self, name: str) -> bool:
        return name in self.variables_

    def get_var(self, name: str) -> Any:
        return self.variables_[name]

    def get_meta_info(self, name: str) -> Any:
        return self.meta_info.get(name)

    def text(self) -> str:
        return self.text_

    def messages(self) -> list[dict]:
        return [dict(m) for m in self.messages_]

    def variables(self) -> dict[str, Any]:
        return dict(self.variables_)

    def error(self) -> BaseException | None:
        return self.error_

    def __repr__(self) -> str:
        status = f"error={self.error_!r}" if self.error_ is not None else f"variables={sorted(self.variables_)}"
        return f"ProgramResult({status})"


def _portable(error: BaseException | None) -> BaseException | None:
    """The error itself if it survives pickling (Ray sends results pickled), else a RuntimeError naming it."""
    if error is None:
        return None
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:   # noqa: BLE001 - any exception type that does not round-trip
        return RuntimeError(f"{type(error).__name__}: {error}")


def _portable_value(value: Any) -> Any:
    try:
        pickle.dumps(value)
        return value
    except Exception:   # noqa: BLE001
        return repr(value)
