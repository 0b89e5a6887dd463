"""ProgramState: the `s` a program receives. `s += expr` submits, `s["name"]` reads (blocking until produced),
`s.fork(n)` branches. ProgramStateGroup is what fork returns."""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Any, AsyncIterator, Callable, Iterator

from .executor import StreamExecutor
from .meta_info import merge_meta
from .ir import ExprLike, ExprList, RoleBegin, RoleEnd, VarScopeBegin, VarScopeEnd, to_expr


class ProgramState:
    def __init__(self, executor: StreamExecutor):
        self._ex = executor
        self.ret_value: Any = None   # what the program function returned

    # --- building -----------------------------------------------------------------------------------------
    def __iadd__(self, other: ExprLike) -> "ProgramState":
        if other is None:
            raise ValueError("cannot append None to a program state")
        self._ex.submit(to_expr(other))
        return self

    def _role(self, role: str, expr: ExprLike | None):
        if expr is not None:
            self += ExprList((RoleBegin(role), to_expr(expr), RoleEnd(role)))
            return None
        return self._role_scope(role)

    @contextmanager
    def _role_scope(self, role: str) -> Iterator[None]:
        self._ex.submit(RoleBegin(role))
        yield
        self._ex.submit(RoleEnd(role))

    def system(self, expr: ExprLike | None = None):
        """`s.system("...")` appends a system block; `with s.system(): ...` wraps what is appended inside."""
        return self._role("system", expr)

    def user(self, expr: ExprLike | None = None):
        return self._role("user", expr)

    def assistant(self, expr: ExprLike | None = None):
        return self._role("assistant", expr)

    @contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """Everything appended inside the block is also stored as variable `name`."""
        self._ex.submit(VarScopeBegin(name))
        yield
        self._ex.submit(VarScopeEnd(name))

    def fork(self, size: int = 1) -> "ProgramStateGroup":
        """`size` branches continuing from here; the shared text is prefilled into the cache once first."""
        if size < 1:
            raise ValueError(f"fork size must be >= 1, got {size}")
        return ProgramStateGroup([ProgramState(ex) for ex in self._ex.fork(size)], self)

    # --- reading ------------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._ex.get_var(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self._ex.set_var(name, value)

    def __contains__(self, name: str) -> bool:
        self._ex.sync()
        return name in self._ex.variables

    def get_var(self, name: str) -> Any:
        return self._ex.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self._ex.set_var(name, value)

    def get_meta_info(self, name: str) -> Any:
        return self._ex.get_meta_info(name)

    def sync(self) -> "ProgramState":
        self._ex.sync()
        return self

    def text(self) -> str:
        self._ex.sync()
        return self._ex.text

    def messages(self) -> list[dict]:
        """The completed role blocks as chat messages."""
        self._ex.sync()
        return [dict(m) for m in self._ex.messages]

    def variables(self) -> dict[str, Any]:
        self._ex.sync()
        return dict(self._ex.variables)

    def error(self) -> BaseException | None:
        """The first error this program hit (a failed call or an exception in the program), or None."""
        self._ex.sync()
        return self._ex.error

    # --- streaming ----------------------------------------------------------------------------------------
    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """Yield text as it is produced: the whole program's, or only variable `var_name`'s."""
        return (piece for piece, _ in self._ex.iter_chunks(var_name) if piece)

    async def text_async_iter(self, var_name: str | None = None,
                              return_meta_data: bool = False) -> AsyncIterator[Any]:
        """text_iter for asyncio. With `return_meta_data` (SGLang's keyword), yields `(text, meta_info)`: the
        backend's meta_info of that chunk (token counts so far; logprob lists as increments, with
        `output_token_logprobs_length` counting them so far), None for text the program appended. Every
        yielded text is non-empty: a chunk that brings only meta_info is merged into the next one."""
        loop = asyncio.get_running_loop()
        it = self._ex.iter_chunks(var_name)
        done = object()
        pending: dict | None = None   # meta_info of empty chunks, not yet yielded
        while True:
            item = await loop.run_in_executor(None, next, it, done)
            if item is done:
                return
            piece, meta = item
            if not return_meta_data:
                if piece:
                    yield piece
                continue
            if meta is None:
                if piece:
                    yield piece, None
                continue
            pending = merge_meta(pending, meta)
            if piece:
                yield piece, pending
                pending = None

    def __aiter__(self) -> AsyncIterator[str]:
        return self.text_async_iter()

    def __repr__(self) -> str:
        text = self.text()
        short = text if len(text) <= 200 else text[:120] + " ... " + text[-60:]
        return f"ProgramState({short!r})"


class ProgramStateGroup:
    """The branches of `s.fork(n)`. `group += expr` appends to every branch (`expr` may be a function of the
    branch index); `group[i]` is one branch; `join()` gathers the branches' new variables into the parent."""

    def __init__(self, states: list[ProgramState], parent: ProgramState):
        self.states = states
        self.parent = parent
        self._fork_len = len(parent._ex.text)   # the parent was synced by fork()

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __setitem__(self, i: int, value: ProgramState) -> None:
        if value is not self.states[i]:   # `forks[i] += x` rebinds the same object
            raise TypeError("cannot replace a fork branch; append to it with forks[i] += ...")

    def __iadd__(self, other: ExprLike | Callable[[int], ExprLike]) -> "ProgramStateGroup":
        for i, state in enumerate(self.states):
            state += other(i) if callable(other) else other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for every branch. "gather_variable": each variable a branch created becomes, in the parent, the
        list of its values across branches. "concate_and_append": also append each branch's new text."""
        if mode not in ("gather_variable", "concate_and_append"):
            raise ValueError(f"join mode must be 'gather_variable' or 'concate_and_append', got {mode!r}")
        parent = self.parent._ex
        parent.sync()
        base_vars, base_len = set(parent.variables), self._fork_len
        for state in self.states:
            state._ex.sync()
            state._ex.end()
            if state._ex.error is not None:
                parent.fail(state._ex.error)
            for k, v in state._ex.variables.items():
                if k not in base_vars:
                    parent.variables.setdefault(k, []).append(v)
        if mode == "concate_and_append":
            self.parent += "".join(state._ex.text[base_len:] for state in self.states)

    def __repr__(self) -> str:
        return f"ProgramStateGroup({len(self.states)} branches)"
