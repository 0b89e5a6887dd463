"""Per-request grammar state: which parse stacks are alive after the tokens so far."""
from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from ..ir.grammar_ir import GrammarIR
from ..vocab.token_index import TokenIndex
from .closing import closing_bytes
from .frames import Arr, End, Lex, Obj, Stack

_MAX_FORCED = 256   # bytes of forced text computed at once
CLOSE_HORIZON = 64  # token budgets at or below this are checked against the shortest completion (closing.py)
CLOSE_MARGIN = 3    # tokens of slack: a token may lengthen the shortest completion, closing starts that early
_CAPPABLE = (Lex, Arr, Obj)


class CompiledGrammar(Protocol):
    """What a matcher reads from its grammar (implemented by grammar.Grammar, which creates matchers)."""
    index: TokenIndex
    vocab_size: int
    words: int                      # int32 words of a packed mask
    initial: tuple[Stack, ...]      # the parse stacks before any byte
    nodes: tuple                    # the IR's nodes
    ir: GrammarIR                   # its `capped` nodes: where generation caps apply

    def run(self, stacks, data: bytes) -> list[Stack]: ...
    def accepting(self, stack: Stack) -> bool: ...
    def next_bytes(self, stack: Stack) -> frozenset: ...
    def stack_mask(self, stack: Stack) -> np.ndarray: ...


class GrammarMatcher:
    """Mutable, cheap to copy. Not thread-safe (one per request); the `Grammar` it reads is shared.

    The verbs are xgrammar's, one name each: `accept_token`, `accept_string`, `fill_next_token_bitmask`,
    `is_terminated`, `rollback`, `reset`, `find_jump_forward_string`."""

    def __init__(self, grammar: CompiledGrammar, stacks=None, terminated: bool = False):
        self.grammar = grammar
        self._trailing = _trailing_ws(grammar)
        self._stacks = stacks if stacks is not None else _initial(grammar, self._trailing)
        self._terminated = terminated
        self.capped_values = 0                  # values that reached a generation cap (see _note_caps)
        self._at_cap: frozenset = frozenset()   # (stack depth, node) of the values at a cap now
        self.closed_at_budget = False           # a mask was cut to the shortest completion (closing_words)
        # the state before each accepted step, newest first, as a linked list ((state, older) or None): copying
        # a matcher shares it, so `copy` stays O(1) however long the generation
        self._history: tuple | None = None
        self._steps = 0                         # accepted steps that `rollback` can undo

    def copy(self) -> "GrammarMatcher":
        m = GrammarMatcher(self.grammar, self._stacks, self._terminated)
        m.capped_values, m._at_cap, m.closed_at_budget = self.capped_values, self._at_cap, self.closed_at_budget
        m._history, m._steps = self._history, self._steps
        return m

    # --- history -----------------------------------------------------------------------------------------------
    def _state(self) -> tuple:
        return self._stacks, self._terminated, self.capped_values, self._at_cap, self.closed_at_budget

    def _push(self, state: tuple) -> None:
        self._history = (state, self._history)
        self._steps += 1

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last `num_tokens` accepted steps (each `accept_token`, or one `accept_string`), restoring the
        state exactly as it was: masks, acceptance, caps counted. Speculative verification and jump-forward
        use it to take back tokens the model did not keep."""
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens < 0:
            raise ValueError(f"rollback takes a count of tokens >= 0, got {num_tokens!r}")
        if num_tokens > self._steps:
            raise ValueError(f"cannot roll back {num_tokens} tokens: only {self._steps} accepted since the start")
        if num_tokens == 0:
            return
        node = self._history
        for _ in range(num_tokens - 1):
            node = node[1]
        state, self._history = node
        self._steps -= num_tokens
        self._stacks, self._terminated, self.capped_values, self._at_cap, self.closed_at_budget = state

    def reset(self) -> None:
        """Back to the start of the grammar, as a fresh matcher."""
        self.__init__(self.grammar)

    # --- masks -------------------------------------------------------------------------------------------------
    def _masks(self):
        return [self.grammar.stack_mask(s) for s in self._stacks]

    def _union(self) -> np.ndarray:
        """int32 [words]: the OR of the stacks' masks. Read-only: with one stack it is the grammar's cached
        mask itself."""
        masks = self._masks()
        if len(masks) == 1:
            return masks[0]
        words = masks[0] | masks[1]
        for p in masks[2:]:
            words |= p
        return words

    def allowed_mask(self) -> np.ndarray:
        """numpy bool [vocab]: tokens allowed next (EOS included iff accepting)."""
        g = self.grammar
        if self._terminated:
            return np.zeros(g.vocab_size, bool)
        words = self._union()
        # a fresh uint8 0/1 array, viewed as bool without a copy
        out = np.unpackbits(words.view(np.uint8), count=g.vocab_size, bitorder="little").view(bool)
        eos = g.index.eos_token_id
        if eos is not None and self.is_accepting():
            out[eos] = True
        return out

    def allowed_token_ids(self) -> torch.Tensor:
        """bool tensor [vocab]: True where the token may be sampled next."""
        return torch.from_numpy(self.allowed_mask())

    def closing_words(self, budget: int) -> np.ndarray | None:
        """With `budget` tokens left (this one included): None while the budget leaves room, else the packed mask
        that spends it on the shortest completion: the single-byte tokens of the bytes that begin one (closing.py),
        or EOS alone once the grammar accepts. Each such token brings the end a byte closer, and forced text
        goes by jump-forward, so a budget of the completion's token cost plus one ends the value, valid, before
        it runs out. Closing starts when the budget is within CLOSE_MARGIN tokens of that (one free token may
        lengthen the completion), and once started it goes on to the end (a jump-forward may leave room again,
        which a free token could spend opening a value too long to close). None also when no completion fits in
        the budget (the request then ends at `length`, as without this). With jump-forward off the forced runs
        cost a token per byte, more than priced, and closing can start too late for the same reason."""
        if budget > CLOSE_HORIZON or self._terminated:
            return None
        g = self.grammar
        found = closing_bytes(g, self._stacks, horizon=4 * budget)
        if found is None or found.tokens >= budget:
            return None
        if found.tokens + 1 + CLOSE_MARGIN < budget and not self.closed_at_budget:
            return None
        words = np.zeros(g.words, np.int32)
        ids = [g.index.eos_token_id] if found.depth == 0 else [_byte_token(g.index, b) for b in found.first]
        for t in ids:
            if t is not None:
                _set_token(words, t)
        if not words.any():
            return None
        self.closed_at_budget = True
        return words

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0, budget: int | None = None) -> None:
        """Write this matcher's allowed set into `bitmask[row]` (int32 [batch, ceil(vocab/32)]; bit j of word w =
        token 32*w+j). Mutates only that row. `budget`: the tokens the request may still generate; near its end
        the set narrows to what completes the grammar in time (closing_words)."""
        g = self.grammar
        if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.shape[1] != g.words:
            raise ValueError(f"bitmask must be int32 [batch, {g.words}], got {tuple(bitmask.shape)} "
                             f"{bitmask.dtype}")
        closing = self.closing_words(budget) if budget is not None else None
        if self._terminated:
            words = np.zeros(g.words, np.int32)
        elif closing is not None:
            words = closing
        else:
            words = self._union()
            eos = g.index.eos_token_id
            if eos is not None and self.is_accepting():
                words = words.copy()
                _set_token(words, eos)
        if bitmask.device.type == "cpu":
            bitmask.numpy()[row] = words      # a view of the tensor's memory: half the cost of a torch copy_
        else:
            bitmask[row].copy_(torch.from_numpy(words).to(bitmask.device, non_blocking=True))


    # --- state -------------------------------------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Consume one token. Returns False, leaving the state unchanged, if it is not allowed.
        EOS is allowed only where the grammar accepts; after it the matcher is terminated."""
        if self._terminated:
            return False
        g = self.grammar
        if token_id == g.index.eos_token_id:
            if self.is_accepting():
                self._push(self._state())
                self._terminated = True
                return True
            return False
        if not (0 <= token_id < g.vocab_size) or not g.index.is_text[token_id]:
            return False
        return self._run(g.index.token_bytes[token_id])


    def accept_string(self, data: str | bytes) -> bool:
        """Consume text (UTF-8 encoded) or raw bytes, e.g. forced text, as one step for `rollback`; False and
        unchanged if rejected."""
        if self._terminated:
            return False
        return self._run(data.encode() if isinstance(data, str) else bytes(data))

    def _run(self, data: bytes) -> bool:
        nxt = self.grammar.run(self._stacks, data)
        if not nxt:
            return False
        self._push(self._state())
        self._stacks = tuple(nxt)
        if self.grammar.ir.capped:
            self._note_caps()
        return True

    def _note_caps(self) -> None:
        """Counts in `capped_values` each value that has just reached a generation cap, so that nothing but its
        end may follow: a capped string at its most characters, a capped array at its most items, an object at
        the depth cap. A value is known by its place in the stack (depth, node) while it stays there."""
        capped, nodes = self.grammar.ir.capped, self.grammar.nodes
        now = set()
        for st in self._stacks:
            for i, f in enumerate(st):
                if type(f) in _CAPPABLE and f.node in capped:
                    k = type(f)
                    if k is Obj or (k is Lex and f.nchars >= nodes[f.node].max_chars) or \
                            (k is Arr and f.index >= nodes[f.node].max_items):
                        now.add((i, f.node))
        self.capped_values += len(now - self._at_cap)
        self._at_cap = frozenset(now)

    def is_accepting(self) -> bool:
        """Whether EOS is allowed now."""
        return not self._terminated and any(self.grammar.accepting(s) for s in self._stacks)

    def is_terminated(self) -> bool:
        """EOS was taken, or nothing but EOS can follow (or only the whitespace RFC 8259 allows after a JSON
        text's root value, which the matcher accepts when it is given but a generation never needs: a
        generation stops here)."""
        if self._terminated:
            return True
        trailing = self._trailing
        return self.is_accepting() and all(self.grammar.next_bytes(s) <= trailing for s in self._stacks)

    def forced_bytes(self) -> bytes:
        """Bytes every continuation must start with (stops where EOS would be allowed)."""
        g = self.grammar
        stacks = self._stacks
        out = bytearray()
        if self._terminated:
            return b""
        while len(out) < _MAX_FORCED:
            if any(g.accepting(s) for s in stacks):
                break
            nb: set[int] = set()
            for s in stacks:
                nb |= g.next_bytes(s)
                if len(nb) > 1:
                    break
            if len(nb) != 1:
                break
            b = nb.pop()
            out.append(b)
            stacks = g.run(stacks, bytes((b,)))
        return bytes(out)

    def find_jump_forward_string(self) -> str:
        """Text every continuation must start with ('' if none); cut at the last whole UTF-8 character."""
        data = self.forced_bytes()
        return data.decode("utf-8", errors="ignore") if _complete_utf8(data) else \
            data[:_last_boundary(data)].decode("utf-8", errors="ignore")


    def __repr__(self) -> str:
        return f"GrammarMatcher({self.grammar!r}, stacks={len(self._stacks)}, terminated={self._terminated})"


def _trailing_ws(grammar: CompiledGrammar) -> frozenset:
    """The bytes a whole JSON text may end with after its root value: the whitespace of mode "any" (the exact
    matcher reads RFC 8259 texts: `[1] `, `{"a": 1}\n`), none in the generation modes and other grammars (a
    structural tag's JSON body is embedded in the tag's IR: what follows its value is the tag's)."""
    if getattr(grammar, "kind", None) != "json_schema":
        return frozenset()
    return frozenset(grammar.ir.whitespace)


def _initial(grammar: CompiledGrammar, trailing: frozenset) -> tuple[Stack, ...]:
    """The grammar's initial stacks, their End frame reading `trailing`."""
    if not trailing:
        return grammar.initial
    end = End(trailing)
    return tuple((end,) + s[1:] if type(s[0]) is End else s for s in grammar.initial)


def _set_token(words: np.ndarray, t: int) -> None:
    """Sets token t's bit in a packed int32 mask (bit j of word w = token 32w+j)."""
    words[t >> 5] |= np.int32(np.uint32(1 << (t & 31)).view(np.int32))


def _byte_token(index: TokenIndex, b: int) -> int | None:
    """The token that is the one byte b, if the vocabulary has one (a byte-level BPE has all 256)."""
    node = index.children[0].get(b)
    ends = index.ends[node] if node is not None else ()
    return ends[0] if ends else None


def _last_boundary(data: bytes) -> int:
    i = len(data)
    while i > 0 and data[i - 1] & 0xC0 == 0x80:
        i -= 1
    if i > 0 and data[i - 1] >= 0xC0:
        need = 2 if data[i - 1] < 0xE0 else 3 if data[i - 1] < 0xF0 else 4
        if len(data) - (i - 1) < need:
            return i - 1
    return len(data)


def _complete_utf8(data: bytes) -> bool:
    return _last_boundary(data) == len(data)
