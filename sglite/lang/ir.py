"""The program IR: what `s += ...` appends. Nodes are plain immutable data with a readable repr, so a traced
program prints as its graph. Execution lives elsewhere (`executor.py` dispatches on `node.op`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Union

from .regexes import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR  # noqa: F401 (SGLang's names)

if TYPE_CHECKING:
    from .choices import ChoicesSamplingMethod
    from .sampling import GenOptions


class Expr:
    """Base of all IR nodes. `op` names the executor handler (`_exec_<op>`); `a + b` builds an ExprList."""

    op: str = ""

    def __add__(self, other: "ExprLike") -> "ExprList":
        return ExprList((self, to_expr(other)))

    def __radd__(self, other: "ExprLike") -> "ExprList":
        return ExprList((to_expr(other), self))

    def flatten(self) -> Iterator["Expr"]:
        yield self


ExprLike = Union[Expr, str]


@dataclass(frozen=True, eq=False)
class Text(Expr):
    """Constant text appended to the prompt."""
    value: str
    op = "text"

    def __repr__(self) -> str:
        short = self.value if len(self.value) <= 60 else self.value[:40] + "..." + self.value[-15:]
        return f"Text({short!r})"


@dataclass(frozen=True, eq=False)
class Gen(Expr):
    """Generate text into variable `name` with the options this gen set (merged over the run's when run)."""
    name: str | None
    params: "GenOptions"
    op = "gen"

    def __repr__(self) -> str:
        return f"Gen({self.name!r}, {self.params.describe()})"


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """Choose one of `choices` by scoring each as a continuation of the prompt."""
    name: str | None
    choices: tuple[str, ...]
    temperature: float
    method: "ChoicesSamplingMethod"
    lora_path: str | None = None     # the LoRA adapter that scores the choices; None: the run's
    op = "select"

    def __repr__(self) -> str:
        return f"Select({self.name!r}, choices={list(self.choices)!r}, method={self.method!r})"


@dataclass(frozen=True, eq=False)
class RoleBegin(Expr):
    role: str
    op = "role_begin"

    def __repr__(self) -> str:
        return f"RoleBegin({self.role!r})"


@dataclass(frozen=True, eq=False)
class RoleEnd(Expr):
    role: str
    op = "role_end"

    def __repr__(self) -> str:
        return f"RoleEnd({self.role!r})"


@dataclass(frozen=True, eq=False)
class VarScopeBegin(Expr):
    """Text appended until the matching VarScopeEnd is stored in variable `name`."""
    name: str
    op = "var_scope_begin"

    def __repr__(self) -> str:
        return f"VarScopeBegin({self.name!r})"


@dataclass(frozen=True, eq=False)
class VarScopeEnd(Expr):
    name: str
    op = "var_scope_end"

    def __repr__(self) -> str:
        return f"VarScopeEnd({self.name!r})"


@dataclass(frozen=True, eq=False)
class ExprList(Expr):
    items: tuple[Expr, ...]
    op = "list"

    def flatten(self) -> Iterator[Expr]:
        for item in self.items:
            yield from item.flatten()

    def __repr__(self) -> str:
        return "[" + ", ".join(repr(x) for x in self.flatten()) + "]"


def to_expr(value: ExprLike) -> Expr:
    """Coerce what a user may append (`str`, IR node, or a list of those) to an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return Text(value)
    if isinstance(value, (list, tuple)):
        return ExprList(tuple(to_expr(v) for v in value))
    raise TypeError(f"cannot append {type(value).__name__} to a program state; append a str or an sgl.gen/"
                    f"sgl.select/role expression (convert numbers with str())")
