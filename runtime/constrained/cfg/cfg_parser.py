"""A top-down parser over lexemes for a normalized CfgIR (normalize.py: no left recursion), with every choice
kept: a parse state is a set of stacks, as in parser/ for JSON.

A stack is a tuple of ints, bottom first. Below the top are continuations: position ids, each "go on at symbol
i of alternative a" (`pos_sym`, `pos_next`). The top is the lexeme being read: a byte-DFA terminal as a negative
code `-1 - (term_base[t] + dfa_state)`; a subgrammar (cfg_ir.Subgrammar) as `Inside(t, its grammar's own parse
stack)`. The empty stack is the accepting one: the start rule is complete.
A continuation with nothing left after the called symbol is not pushed (a tail call), so repetition written as
right recursion (which left recursion is rewritten into) keeps stacks short, and equal stacks merge.
Lexing is nondeterministic: a lexeme may end wherever its DFA accepts (Lark's `dynamic_complete` Earley lexer
reads the same strings). Ignored terminals may start at every lexeme boundary."""
from __future__ import annotations

from typing import NamedTuple

from ..cache import CacheBudget, LruCache
from ..errors import GrammarError
from .cfg_ir import CfgIR, Subgrammar

Stack = tuple   # tuple[int, ...], an Inside on top where a subgrammar is being read
_MAX_STACKS = 20_000       # stacks alive at once; past this the grammar is too ambiguous to run


class Inside(NamedTuple):
    """The top of a stack inside subgrammar terminal `term`: that grammar's parse stack `stack`."""
    term: int
    stack: tuple


class Opaque(Exception):
    """Raised where a computation reaches `CfgParser.opaque`: it needs the frames a shortened stack left out."""


class CfgParser:
    """Tables and the byte stepper for one normalized grammar. Immutable apart from its caches (LruCaches charged
    to the index's budget), so one instance serves every request."""

    def __init__(self, ir: CfgIR, caches: CacheBudget):
        terms = list(ir.terminals)
        tid = {name: i for i, name in enumerate(terms)}
        rules = list(ir.rules)
        nid = {name: len(terms) + i for i, name in enumerate(rules)}
        self.num_terms = len(terms)
        self.terminals = [ir.terminals[n] for n in terms]
        # terminal -> its compiled grammar, for subgrammars (their `dfas` entry is None)
        self.subs = {t: x.grammar for t, x in enumerate(self.terminals) if isinstance(x, Subgrammar)}
        self.dfas = [None if t in self.subs else x.dfa for t, x in enumerate(self.terminals)]
        self.rows = [d.table_list if d else None for d in self.dfas]
        self.acc = [d.accepting_list if d else None for d in self.dfas]
        self.term_base: list[int] = []
        self.lex_term: list[int] = []       # lexeme code -> terminal
        self.lex_state: list[int] = []      # lexeme code -> DFA state
        for t, d in enumerate(self.dfas):
            self.term_base.append(len(self.lex_term))
            if d is not None:
                self.lex_term.extend([t] * d.num_states)
                self.lex_state.extend(range(d.num_states))
        self.pos_sym: list[int] = []
        self.pos_next: list[int] = []       # -1: the alternative ends after this symbol
        self.alts: list[list[int]] = [[] for _ in rules]     # rule -> first position of each alternative (-1: empty)
        for name in rules:
            for alt in ir.rules[name]:
                if not alt:
                    self.alts[nid[name] - self.num_terms].append(-1)
                    continue
                first = len(self.pos_sym)
                for k, s in enumerate(alt):
                    self.pos_sym.append(tid[s.name] if s.terminal else nid[s.name])
                    self.pos_next.append(first + k + 1 if k + 1 < len(alt) else -1)
                self.alts[nid[name] - self.num_terms].append(first)
        self.ignore = [tid[n] for n in ir.ignore]
        for t in self.ignore:
            if t in self.subs:
                raise GrammarError(f"terminal {terms[t]!r} is a subgrammar, which cannot be ignored between lexemes")
        for t, g in self.subs.items():
            if any(g.accepting(s) for s in g.initial):
                raise GrammarError(f"subgrammar {terms[t]!r} accepts the empty string; a lexeme must read at "
                                   "least one byte")
        # terminal -> the stack tops of its lexeme at its start (a subgrammar may start in several stacks)
        self.starts = [tuple(Inside(t, s) for s in self.subs[t].initial) if t in self.subs
                       else (-1 - self.term_base[t] - self.dfas[t].start,) for t in range(self.num_terms)]
        # a position no alternative has: the bottom of a shortened stack (`shorten`), standing for frames left
        # out; whatever would read it raises Opaque, so what is computed without raising holds for every stack
        # with the same frames above it
        self.opaque = len(self.pos_sym)
        # per stack, charged to `caches` (the grammar's index's budget)
        self._expand = LruCache(caches, "cfg expansions")
        self._complete = LruCache(caches, "cfg completions")
        self._accepting = LruCache(caches, "cfg accepting")
        self._next = LruCache(caches, "cfg next bytes")
        self._enter = LruCache(caches, "cfg lexeme entries")
        start = nid[ir.start]
        self.initial: tuple[Stack, ...] = self.after_call(start)

    # --- structure ---------------------------------------------------------------------------------------------
    def lex(self, stack: Stack) -> tuple[int, int]:
        """(terminal, DFA state) of the byte-DFA lexeme on top of a non-empty stack."""
        code = -1 - stack[-1]
        return self.lex_term[code], self.lex_state[code]

    def may_end(self, top) -> bool:
        """Whether the lexeme at stack top `top` may end here."""
        if type(top) is Inside:
            return self.subs[top.term].accepting(top.stack)
        code = -1 - top
        return self.acc[self.lex_term[code]][self.lex_state[code]]

    def live_bytes(self, top) -> frozenset | tuple:
        """The bytes the lexeme at stack top `top` can read next."""
        if type(top) is Inside:
            return self.subs[top.term].next_bytes(top.stack)
        code = -1 - top
        return self.dfas[self.lex_term[code]].live_bytes(self.lex_state[code])

    def after_call(self, rule: int) -> tuple[Stack, ...]:
        """The stacks at the start of `rule` with nothing below it, ignored terminals before it included."""
        out: list[Stack] = []
        for f in self.alts[rule - self.num_terms]:
            out.extend(self.complete((f,) if f >= 0 else ()))
        return tuple(dict.fromkeys(out))

    def expand(self, below: Stack) -> tuple[Stack, ...]:
        """The stacks with a lexeme (at its DFA's start) on top, or the empty one, that continuation stack `below`
        can reach without reading a byte (predicting rules, returning from finished ones). Cached."""
        hit = self._expand.get(below)
        if hit is None:
            out: list[Stack] = []
            self._push(below, out, 0)
            hit = self._expand.put(below, tuple(dict.fromkeys(out)))
        return hit

    def _push(self, below: Stack, out: list, depth: int) -> None:
        if not below:
            out.append(())
            return
        if depth > 10_000 or len(out) > _MAX_STACKS:
            raise GrammarError(f"the grammar predicts more than {_MAX_STACKS} parse stacks at one position")
        p = below[-1]
        if p == self.opaque:
            raise Opaque
        nxt = self.pos_next[p]
        cont = below[:-1] + (nxt,) if nxt >= 0 else below[:-1]
        sym = self.pos_sym[p]
        if sym < self.num_terms:
            out.extend(cont + (top,) for top in self.starts[sym])
            return
        for f in self.alts[sym - self.num_terms]:
            self._push(cont + (f,) if f >= 0 else cont, out, depth + 1)

    def shorten(self, stack: Stack, keep: int) -> Stack:
        """`stack`'s top `keep` entries on `opaque` (the stack itself if that is all of it)."""
        return stack if len(stack) <= keep else (self.opaque,) + stack[-keep:]

    def complete(self, below: Stack) -> tuple[Stack, ...]:
        """The stacks after a lexeme ends on top of `below`: what `below` expands to, and an ignored terminal
        starting on `below` itself. Cached."""
        hit = self._complete.get(below)
        if hit is None:
            out = list(self.expand(below)) + [below + self.starts[t] for t in self.ignore]
            hit = self._complete.put(below, tuple(dict.fromkeys(out)))
        return hit

    # --- reading bytes -----------------------------------------------------------------------------------------
    def run(self, stacks, data: bytes) -> list[Stack]:
        """The stacks after reading `data` from any of `stacks` (empty: rejected). Pure."""
        cur = stacks
        for b in data:
            nxt: dict[Stack, None] = {}
            for st in cur:
                self._step(st, b, nxt)
            if not nxt:
                return []
            if len(nxt) > _MAX_STACKS:
                raise GrammarError(f"the grammar keeps more than {_MAX_STACKS} parses alive: too ambiguous to run")
            cur = nxt
        return list(cur)

    def _step(self, st: Stack, b: int, out: dict) -> None:
        if not st:
            return
        top = st[-1]
        if type(top) is Inside:
            self._step_inside(st, b, out)
            return
        code = -1 - top
        t = self.lex_term[code]
        s = self.lex_state[code]
        ns = self.rows[t][s][b]
        if ns >= 0:
            out[st[:-1] + (-1 - self.term_base[t] - ns,)] = None
        if self.acc[t][s]:
            for succ in self.enter(st[:-1], b):
                out[succ] = None

    def _step_inside(self, st: Stack, b: int, out: dict) -> None:
        """`_step` for a subgrammar on top: its grammar reads the byte, and where it accepts the lexeme may end."""
        t, inner = st[-1]
        g = self.subs[t]
        for s2 in g.run((inner,), bytes((b,))):
            out[st[:-1] + (Inside(t, s2),)] = None
        if g.accepting(inner):
            for succ in self.enter(st[:-1], b):
                out[succ] = None

    def run_after(self, below: Stack, data: bytes) -> list[Stack]:
        """The stacks after a lexeme ends on `below` and non-empty `data` is read (empty: rejected). Pure."""
        first = self.enter(below, data[0])
        return self.run(first, data[1:]) if first else []

    def enter(self, below: Stack, b: int) -> tuple[Stack, ...]:
        """The stacks after a lexeme ends on `below` and the next one reads byte `b`, its first. Cached: every
        stack that ends a lexeme on `below` steps through here (the stacks `complete` gives are many where many
        lexemes may come next, a grammar's keywords; few of them read a given byte)."""
        hit = self._enter.get((below, b))
        if hit is None:
            hit = self._enter.put((below, b), self._enter_uncached(below, b))
        return hit

    def _enter_uncached(self, below: Stack, b: int) -> tuple[Stack, ...]:
        out = []
        for succ in self.complete(below):
            if not succ:
                continue
            top = succ[-1]
            if type(top) is Inside:      # a subgrammar at its start (it never accepts there)
                out.extend(succ[:-1] + (Inside(top.term, s2),) for s2 in self.subs[top.term].run((top.stack,),
                                                                                                  bytes((b,))))
                continue
            code = -1 - top
            t = self.lex_term[code]
            ns = self.rows[t][self.lex_state[code]][b]
            if ns >= 0:
                out.append(succ[:-1] + (-1 - self.term_base[t] - ns,))
        return tuple(dict.fromkeys(out))

    def accepting(self, stack: Stack) -> bool:
        """Whether the input may end here: the start rule is complete, or the top lexeme may end and complete it."""
        if not stack:
            return True
        hit = self._accepting.get(stack)
        if hit is None:
            hit = self._accepting.put(stack, self.may_end(stack[-1]) and () in self.expand(stack[:-1]))
        return hit

    def next_bytes(self, stack: Stack) -> frozenset:
        """Bytes that can come next from `stack`. Cached."""
        if not stack:
            return frozenset()
        hit = self._next.get(stack)
        if hit is None:
            out = set(self.live_bytes(stack[-1]))
            if self.may_end(stack[-1]):
                out.update(self.follow_bytes(stack[:-1]))
            hit = self._next.put(stack, frozenset(out))
        return hit

    def follow_bytes(self, below: Stack) -> set[int]:
        """The bytes that may come first after a lexeme ends on `below`."""
        out: set[int] = set()
        for succ in self.complete(below):
            if succ:
                out.update(self.live_bytes(succ[-1]))
        return out
