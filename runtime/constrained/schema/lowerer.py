"""What the per-type lowerings (literals, numbers, strings, containers) need from the schema compiler: the
boundary that lets them live apart from `SchemaCompiler`, which dispatches to them."""
from __future__ import annotations

from typing import Any, Callable, Optional, Protocol

from ..automata.byte_dfa import ByteDFA
from ..automata.rx import Rx
from ..ir.nodes import Node
from .document import SchemaDocument


class Lowerer(Protocol):
    """One compilation in progress (implemented by SchemaCompiler). Node ids are indices into its node list."""
    doc: SchemaDocument     # the root document `$ref`s resolve in
    canonical: bool         # generation mode: no needless escapes in strings, capped digit runs
    close_objects: bool     # generation mode: objects declaring names get no others unless the schema says so

    def add(self, node: Node) -> int:
        """Append `node`; returns its id."""

    def compile(self, schema: Any, ptr: str) -> int:
        """The node id of a sub-schema found at JSON pointer `ptr`."""

    def dfa(self, key: tuple, build: Callable[[], ByteDFA]) -> ByteDFA:
        """The lexeme DFA cached under `key` (built by `build` on a miss; shared between compilations)."""

    def never(self) -> int:
        """A node that matches no value."""

    def lex(self, tree: Rx, source: Optional[str] = None) -> int:
        """A lexeme node matching regex tree `tree` exactly (not a JSON string), printed as `source` (default:
        the tree as /regex/)."""

    def plain_string(self, min_len: int, max_len: Optional[int]) -> int:
        """A JSON string node of any content, with character-count bounds."""
