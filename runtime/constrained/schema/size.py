"""A schema's size before anything reads it: every JSON value in it counts once (objects, arrays, strings,
numbers), so an `anyOf` nested 16 deep that repeats its subschema, or an enum of 10,000 strings, is refused in
milliseconds instead of compiled for a minute."""
from __future__ import annotations

from typing import Any

from ..budget import CompileBudgetExceeded


def check_schema_size(schema: Any, limit: int) -> None:
    """Raises CompileBudgetExceeded naming the JSON pointer where the count passes `limit`."""
    stack: list[tuple[Any, str]] = [(schema, "#")]
    seen = 0
    while stack:
        value, ptr = stack.pop()
        seen += 1
        if seen > limit:
            where = ptr if len(ptr) <= 120 else f"{ptr[:60]}...{ptr[-60:]}"
            raise CompileBudgetExceeded(f"schema at {where}: the schema holds more than {limit:,} JSON values, past the "
                                        "compile budget; split it, or shorten its enums and repeated subschemas")
        if isinstance(value, dict):
            stack.extend((v, f"{ptr}/{_escape(str(k))}") for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{ptr}/{i}") for i, v in enumerate(value))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
