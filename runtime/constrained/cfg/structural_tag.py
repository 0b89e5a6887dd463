"""Structural tags: free text that switches into a constrained region when a trigger appears, then back.

    {"structures": [{"begin": "<tool_call>", "schema": {...}, "end": "</tool_call>"}],
     "triggers": ["<tool_call>"]}                   (SGLang's / xgrammar's shape; "type": "structural_tag" optional)

Free text is any text in which no trigger occurs. Where one is completed, the text goes on as the `begin` of a
structure that starts with that trigger, then one JSON value under its schema (a compiled JSON `Grammar`), then
its `end`, then free text again. The text may end (EOS) only in free text.

A parse stack here is a tuple: ("T", q) free text in trigger-automaton state q; ("B", i, k) k bytes into
structure i's begin; ("J", i, s) inside its JSON value at JSON stack s; ("E", i, k) k bytes into its end.
Masks: free text from the trigger automaton's token classification (only tokens that complete a trigger are
run through the parser); literals by walking the vocabulary trie along them; JSON from its own cached stack
masks, plus the few tokens that close the value and start the end."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..automata.byte_dfa import ByteDFA, trimmed_dfa
from ..errors import GrammarError
from ..parser.matcher import GrammarMatcher
from ..vocab.token_index import TokenIndex
from .cfg_masks import _pack

_CACHE_LIMIT = 8_192
_ALL_BYTES = frozenset(range(256))


@dataclass(frozen=True)
class TagStructure:
    begin: str
    schema: Any
    end: str


class _NoCaps(NamedTuple):
    capped: frozenset = frozenset()     # GrammarMatcher reads the IR's generation caps: none here


def parse_structural_tag(spec: Any) -> tuple[tuple[TagStructure, ...], tuple[str, ...], str]:
    """(structures, triggers, canonical JSON text) from a dict or JSON text. Raises GrammarError naming the
    field at fault."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise GrammarError(f"structural_tag is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise GrammarError(f"structural_tag must be an object with 'structures' and 'triggers', got {spec!r:.80}")
    unknown = set(spec) - {"type", "structures", "triggers"}
    if unknown or spec.get("type", "structural_tag") != "structural_tag":
        raise GrammarError(f"structural_tag takes 'structures', 'triggers' (and type 'structural_tag'); got "
                           f"{sorted(unknown) or spec.get('type')!r}")
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise GrammarError("structural_tag 'triggers' must be a non-empty list of non-empty strings")
    items = spec.get("structures")
    if not isinstance(items, list) or not items:
        raise GrammarError("structural_tag 'structures' must be a non-empty list")
    out = []
    for i, s in enumerate(items):
        where = f"structural_tag structures[{i}]"
        if not isinstance(s, dict) or set(s) != {"begin", "schema", "end"}:
            raise GrammarError(f"{where} must have exactly 'begin', 'schema' and 'end'")
        if not isinstance(s["begin"], str) or not any(s["begin"].startswith(t) for t in triggers):
            raise GrammarError(f"{where}.begin {s['begin']!r} must start with one of the triggers {triggers}")
        if not isinstance(s["end"], str) or not s["end"]:
            raise GrammarError(f"{where}.end must be a non-empty string")
        if not isinstance(s["schema"], (dict, bool)):
            raise GrammarError(f"{where}.schema must be a JSON Schema object")
        out.append(TagStructure(s["begin"], s["schema"], s["end"]))
    canonical = json.dumps({"structures": [s.__dict__ for s in out], "triggers": triggers}, sort_keys=True)
    return tuple(out), tuple(triggers), canonical


class StructuralTagGrammar:
    """Implements parser/matcher.py's CompiledGrammar; `bodies[i]` is structure i's compiled JSON Grammar.
    Immutable and shared; its caches only grow."""

    def __init__(self, spec: str, index: TokenIndex, structures: tuple[TagStructure, ...], triggers: tuple[str, ...],
                 bodies: list):
        self.kind, self.spec, self.index = "structural_tag", spec, index
        self.structures, self.bodies = structures, bodies
        self.begins = [s.begin.encode() for s in structures]
        self.ends = [s.end.encode() for s in structures]
        trigs = [t.encode() for t in triggers]
        self.text, suffixes = _trigger_free_text(trigs)
        self.text_rows = self.text.table_list
        # (text state, byte completing a trigger) -> (structure, bytes of its begin read) for each structure
        # that starts with a trigger completed there
        self._enter: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for q, suffix in enumerate(suffixes):
            for b in range(256):
                if self.text_rows[q][b] >= 0:
                    continue
                done = [t for t in trigs if (suffix + bytes((b,))).endswith(t)]
                self._enter[(q, b)] = [(i, len(t)) for i, lit in enumerate(self.begins) for t in done
                                       if lit.startswith(t)]
        self.ir, self.nodes = _NoCaps(), ()
        self.vocab_size = index.vocab_size
        self.words = (index.vocab_size + 31) // 32
        self.initial = (("T", self.text.start),)
        self._masks: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self)

    # --- the parser --------------------------------------------------------------------------------------------
    def run(self, stacks, data: bytes) -> list[tuple]:
        cur = stacks
        for b in data:
            nxt: dict[tuple, None] = {}
            for st in cur:
                self._step(st, b, nxt)
            if not nxt:
                return []
            cur = nxt
        return list(cur)

    def _step(self, st: tuple, b: int, out: dict) -> None:
        phase = st[0]
        if phase == "T":
            q = self.text_rows[st[1]][b]
            if q >= 0:
                out[("T", q)] = None
            else:
                for i, k in self._enter.get((st[1], b), ()):
                    self._after_literal(("B", i, 0), k, out)
        elif phase == "J":
            i, s = st[1], st[2]
            for s2 in self.bodies[i].run((s,), bytes((b,))):
                out[("J", i, s2)] = None
            if self.bodies[i].accepting(s) and self.ends[i][0] == b:
                self._after_literal(("E", i, 0), 1, out)
        else:
            lit = self.begins[st[1]] if phase == "B" else self.ends[st[1]]
            if lit[st[2]] == b:
                self._after_literal(st, st[2] + 1, out)

    def _after_literal(self, st: tuple, k: int, out: dict) -> None:
        """The stacks once k bytes of the begin or end literal of `st` are read."""
        phase, i = st[0], st[1]
        lit = self.begins[i] if phase == "B" else self.ends[i]
        if k < len(lit):
            out[(phase, i, k)] = None
        elif phase == "B":
            for s in self.bodies[i].initial:
                out[("J", i, s)] = None
        else:
            out[("T", self.text.start)] = None

    def accepting(self, stack: tuple) -> bool:
        return stack[0] == "T"

    def next_bytes(self, stack: tuple) -> frozenset:
        phase = stack[0]
        if phase == "T":
            return _ALL_BYTES
        if phase == "J":
            g, s = self.bodies[stack[1]], stack[2]
            return g.next_bytes(s) | ({self.ends[stack[1]][0]} if g.accepting(s) else set())
        lit = self.begins[stack[1]] if phase == "B" else self.ends[stack[1]]
        return frozenset((lit[stack[2]],))

    # --- masks -------------------------------------------------------------------------------------------------
    def stack_mask(self, stack: tuple) -> np.ndarray:
        """Packed int32 [words] bitmask of the text tokens allowed from `stack`. Cached."""
        hit = self._masks.get(stack)
        if hit is not None:
            return hit
        ones: list[int] = []
        extra: list[np.ndarray] = []
        phase = stack[0]
        if phase == "T":
            cls = self.index.classify(self.text, stack[1])
            extra.append(self.index.packed_inside(self.text, stack[1]))
            leaving = {t for _, _, toks in cls.leaving for t, _ in toks}
            for q, b in self._enter:        # tokens whose first byte completes a trigger
                if q == stack[1]:
                    leaving.update(np.flatnonzero(self.index.token_first == b).tolist())
            self._check(stack, leaving, ones)
        elif phase == "J":
            i, s = stack[1], stack[2]
            extra.append(self.bodies[i].stack_mask(s))
            if self.bodies[i].accepting(s):
                extra.append(self.stack_mask(("E", i, 0)))
            self._check(stack, self._closers(i), ones)
        else:
            lit = self.begins[stack[1]] if phase == "B" else self.ends[stack[1]]
            node, children, ends = 0, self.index.children, self.index.ends
            for b in lit[stack[2]:]:
                node = children[node].get(b)
                if node is None:
                    break
                ones.extend(ends[node])
            else:       # tokens that run past the literal's end
                self._check(stack, _below(self.index, node), ones)
        packed = _pack(ones, self.words, extra)
        with self._lock:
            if len(self._masks) > _CACHE_LIMIT:
                self._masks.clear()
            self._masks[stack] = packed
        return packed

    def _check(self, stack: tuple, tokens, ones: list[int]) -> None:
        """Append to `ones` those of `tokens` the parser accepts from `stack`."""
        tb = self.index.token_bytes
        first = self.next_bytes(stack)
        for t in tokens:
            if self.index.is_text[t] and tb[t][0] in first and self.run((stack,), tb[t]):
                ones.append(t)

    def _closers(self, i: int) -> list[int]:
        """Tokens that may close structure i's JSON value part-way and start its end: those holding the end's
        first byte after their first byte. Cached."""
        key = ("closers", i)
        hit = self._masks.get(key)
        if hit is None:
            e = self.ends[i][0]
            hit = [t for t in self.index.text_tokens if e in self.index.token_bytes[t][1:]]
            self._masks[key] = hit
        return hit

    def __repr__(self) -> str:
        return f"StructuralTagGrammar({len(self.structures)} structures, {self.spec[:60]!r})"

    def __str__(self) -> str:
        lines = ["root ::= text (structure text)*", "text ::= /any text without a trigger/"]
        lines += [f"structure ::= {json.dumps(s.begin)} json_{i} {json.dumps(s.end)}"
                  for i, s in enumerate(self.structures)]
        return "\n".join(lines)


def _below(index: TokenIndex, node: int) -> list[int]:
    """Tokens strictly below trie node `node`."""
    lo, hi = index.tok_lo[node], index.tok_hi[node]
    return [t for t in index.by_pre[lo:hi].tolist() if len(index.token_bytes[t]) > index.depth[node]]


def _trigger_free_text(triggers: list[bytes]) -> tuple[ByteDFA, list[bytes]]:
    """Byte DFA of the texts in which no trigger occurs (every state accepting; completing a trigger is dead),
    and each state's text suffix: the longest that is a proper prefix of some trigger (Aho-Corasick)."""
    prefixes = sorted({t[:k] for t in triggers for k in range(len(t))}, key=lambda p: (len(p), p))
    state = {p: i for i, p in enumerate(prefixes)}
    rows = []
    for p in prefixes:
        row = []
        for b in range(256):
            s = p + bytes((b,))
            if any(s.endswith(t) for t in triggers):
                row.append(-1)
                continue
            while s not in state:
                s = s[1:]
            row.append(state[s])
        rows.append(row)
    return trimmed_dfa(rows, 0, [True] * len(rows), {}, [False] * len(rows)), prefixes
