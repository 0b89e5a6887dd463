"""Grammar IR nodes: the immutable pieces a JSON schema or regex lowers to. Nodes refer to each other by index
into `GrammarIR.nodes`, so recursive schemas ($ref cycles) are plain cycles of indices."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from ..automata.byte_dfa import ByteDFA

EXTRA = ("<additional property>",)   # key-DFA label of a property name not among `properties`


@dataclass(frozen=True, eq=False)
class LexNode:
    """A value that is one lexeme: string, number, literal, enum of scalars. `min_chars`/`max_chars` count
    JSON-decoded characters of a string lexeme outside the DFA (no product automaton needed)."""
    dfa: ByteDFA
    min_chars: int = 0
    max_chars: Optional[int] = None
    source: Optional[str] = None          # how it prints: a /regex/, a "literal", or words (`string`)

    @property
    def counted(self) -> bool:
        return self.min_chars > 0 or self.max_chars is not None


@dataclass(frozen=True, eq=False)
class ObjectNode:
    props: dict[str, int]                 # property name -> value node
    required: frozenset[str]
    additional: Optional[int]             # node for other names; None = no other names allowed
    min_props: int = 0
    max_props: Optional[int] = None
    patterns: tuple = ()                  # patternProperties: CharFSMs (search semantics)
    pattern_nodes: dict = field(default_factory=dict)   # frozenset of matched pattern indices -> value node
    deps: dict = field(default_factory=dict)   # dependentRequired: name -> names required when it is present
    pattern_text: tuple[str, ...] = ()    # the patterns' regexes, for printing

    @cached_property
    def rank(self) -> dict[str, int]:
        """Schema position of each named property (the generation order when properties are ordered)."""
        return {n: i for i, n in enumerate(self.props)}

    def other_node(self, matched: frozenset) -> Optional[int]:
        """Value node for a name not in `props` matching the given patterns (None: such names not allowed)."""
        return self.pattern_nodes[matched] if matched else self.additional


@dataclass(frozen=True, eq=False)
class ArrayNode:
    prefix: tuple[int, ...]
    items: Optional[int]                  # node for items past the prefix; None = none allowed
    min_items: int = 0
    max_items: Optional[int] = None

    def item(self, i: int) -> Optional[int]:
        return self.prefix[i] if i < len(self.prefix) else self.items


@dataclass(frozen=True, eq=False)
class UnionNode:
    alts: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class NeverNode:
    """No value at all (schema `false`, or contradictory constraints)."""


Node = LexNode | ObjectNode | ArrayNode | UnionNode | NeverNode
