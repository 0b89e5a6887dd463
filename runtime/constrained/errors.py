"""Errors raised at grammar compile time. Both are ValueErrors so request validation can catch one type."""
from __future__ import annotations


class GrammarError(ValueError):
    """A malformed regex, schema or grammar, or one too large to compile within the limits."""


class UnsupportedSchemaError(ValueError):
    """A JSON Schema keyword that the compiler cannot enforce exactly (we never weaken a schema silently).

    `keyword` is the keyword's name and `pointer` the JSON pointer of the schema object that holds it."""

    def __init__(self, keyword: str, pointer: str, detail: str = ""):
        self.keyword = keyword
        self.pointer = pointer or "#"
        msg = f"unsupported JSON Schema keyword {keyword!r} at {self.pointer}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg + " (remove it or rewrite the schema without it)")
