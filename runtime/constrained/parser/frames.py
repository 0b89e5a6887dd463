"""Parse frames: the entries of a parse stack. A stack is a tuple of frames, bottom first; a parse state is a
tuple of stacks (nondeterminism from `anyOf` keeps several).

Frames are NamedTuples, so stacks hash and compare as plain tuples (they key the mask and next-byte caches),
and each carries its `kind` letter as a last, defaulted field, so frames of different kinds never compare equal.
A `Lex` frame is always on top of a structural frame (`Value`'s place) or a `Seq` or `End`, a `Key` frame on top
of its `Obj`.
Frames are immutable values; the parser shares the frequent ones (see `Parser.lex_frame`)."""
from __future__ import annotations

from typing import NamedTuple, Optional

# Obj.phase: where in the object the parser is
OBJ_OPEN = 0        # after '{'
OBJ_NAMED = 1       # after a property name (':' next; `Obj.value` is the name's value node)
OBJ_VALUED = 2      # after a property value
OBJ_COMMA = 3       # after ','
# Arr.phase
ARR_OPEN = 0        # after '['
ARR_ITEM = 1        # after an item
ARR_COMMA = 2       # after ','


class End(NamedTuple):
    """The bottom of every stack: the root value is complete, nothing but EOS may follow, or (at the bottom of a
    whole JSON text read with whitespace "any") the `ws` bytes, as RFC 8259 allows after the value: `[1] `."""
    ws: frozenset = frozenset()
    kind: str = "E"


class Value(NamedTuple):
    """A value of IR node `node` is expected (leading whitespace allowed)."""
    node: int
    kind: str = "V"


class Lex(NamedTuple):
    """Inside a lexeme of LexNode `node`, its DFA in `state`, `nchars` JSON characters read (counted strings)."""
    node: int
    state: int
    nchars: int
    kind: str = "L"


class Key(NamedTuple):
    """Inside a property name of ObjectNode `node`, its one key DFA in `state`. Always right above the object's
    Obj frame, which holds the names seen so far. `name`: the name's bytes read so far, opening quote included,
    only where undeclared names must not repeat (`ObjectKeys.tracks_names`); else b"" and the frame is shared."""
    node: int
    state: int
    name: bytes = b""
    kind: str = "K"


class Obj(NamedTuple):
    """Inside ObjectNode `node` at `phase` (OBJ_*), names `seen` so far, `nkeys` properties read. `seen` holds
    declared names as str and, where they are tracked, undeclared ones as their bytes with quotes (never equal)."""
    node: int
    phase: int
    seen: frozenset
    nkeys: int
    value: Optional[int] = None     # OBJ_NAMED only: the value node of the name just read
    kind: str = "O"


class Arr(NamedTuple):
    """Inside ArrayNode `node` at `phase` (ARR_*), `index` items read (capped once the count no longer matters),
    `matched` of them matching `contains` where the node counts them (capped likewise, ArrayNode.counted_items)."""
    node: int
    phase: int
    index: int
    matched: int = 0
    kind: str = "A"


class Seq(NamedTuple):
    """Inside SeqNode `node`, its items before `pos` read: item `pos` is next. Never pushed for the last item
    (a tail call), so right recursion keeps stacks short."""
    node: int
    pos: int
    kind: str = "S"


class Ran(NamedTuple):
    """Right after a bounded whitespace run (`Parser.ws_run`), on top of the structural frame the run was in:
    another run may not start here; any other byte goes to the frame below."""
    kind: str = "R"


Frame = End | Value | Lex | Key | Obj | Arr | Seq | Ran
Stack = tuple     # tuple[Frame, ...], bottom first
END = End()
RAN = Ran()
LEXEMES = (Lex, Key)            # frames inside a lexeme (a DFA runs on their bytes)
STRUCTURAL = (Value, Obj, Arr)  # frames whose whitespace leaves the stack as it is
