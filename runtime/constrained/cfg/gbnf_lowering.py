"""GBNF rules (gbnf_reader.py) -> CfgIR.

GBNF has no lexer: every string and class is matched character by character. Lexemes are what keeps token
masks fast, so the regular parts become lexemes: a rule that reaches no recursion is regular and is inlined as
a regex tree (automata/rx.py), and within a sequence each run of regular items becomes one terminal. GBNF skips
nothing between lexemes, so where the lexeme boundaries fall does not change the language. A regular part that
matches the empty string becomes an optional terminal (lexemes are never empty)."""
from __future__ import annotations

from ..automata import rx
from ..automata.dfa_lowering import lower_char_fsm
from ..errors import GrammarError
from .cfg_ir import Alt as IrAlt
from .cfg_ir import CfgIR, Sym, Terminal, without_empty
from .gbnf_reader import Alt, AnyChar, Cls, Expr, Lit, Ref, Rep, Seq, read_gbnf
from .normalize import _sccs


_ANY = rx.Cls(((0, 0x10FFFF),))     # any one character, a newline too


def gbnf_to_ir(text: str) -> CfgIR:
    """Parse GBNF `text` (start rule `root`) into a CfgIR. Raises GrammarError naming the rule or position."""
    return _Lowering(read_gbnf(text)).build()


class _Lowering:
    def __init__(self, exprs: dict[str, Expr]):
        if "root" not in exprs:
            raise GrammarError("GBNF grammar has no `root` rule (the start rule must be named root)")
        self.exprs = exprs
        refs = {name: sorted(_refs(e)) for name, e in exprs.items()}
        for name, names in refs.items():
            for r in names:
                if r not in exprs:
                    raise GrammarError(f"rule {r!r} used in rule {name!r} is not defined")
        self.regular = _regular_rules(list(exprs), refs)
        self.rules: dict[str, list[IrAlt]] = {}
        self.terminals: dict[str, Terminal] = {}
        self._by_tree: dict[rx.Rx, tuple[Sym, ...]] = {}

    def build(self) -> CfgIR:
        # every non-regular rule (regular ones are inlined where used), and root; normalize drops what
        # root does not reach
        for name, expr in self.exprs.items():
            if name == "root" or name not in self.regular:
                options = expr.options if isinstance(expr, Alt) and name not in self.regular else (expr,)
                self.rules[name] = [self.sequence(o, name) for o in options]
        order = [n for n in self.exprs if n in self.rules] + [n for n in self.rules if n not in self.exprs]
        return CfgIR({n: tuple(self.rules[n]) for n in order}, self.terminals, "root")

    def sequence(self, expr: Expr, rule: str) -> IrAlt:
        """One alternative: each run of regular items as one terminal, other items as rules."""
        items = expr.items if isinstance(expr, Seq) else (expr,)
        out: list[Sym] = []
        run: list[Expr] = []
        for item in items:
            if self.is_regular(item):
                run.append(item)
                continue
            if run:
                out.extend(self.lexeme(Seq(tuple(run)), rule))
                run = []
            out.append(self.structure(item, rule))
        if run:
            out.extend(self.lexeme(Seq(tuple(run)), rule))
        return tuple(out)

    def structure(self, item: Expr, rule: str) -> Sym:
        """A symbol for a non-regular item: a rule reference, or a helper rule for a group or repetition."""
        if isinstance(item, Ref):
            return Sym(item.name, False)
        helper = self.fresh(f"{rule}_group" if isinstance(item, (Alt, Seq)) else f"{rule}_rep")
        if isinstance(item, Alt):
            self.rules[helper] = [self.sequence(o, rule) for o in item.options]
        elif isinstance(item, Seq):
            self.rules[helper] = [self.sequence(item, rule)]
        else:       # Rep: min copies, then up to (max - min) optional ones, or a right-recursive tail
            one = self.sequence(item.item, rule)
            if item.max is None:
                tail = self.fresh(f"{rule}_star")
                self.rules[tail] = [one + (Sym(tail, False),), ()]
                rest: IrAlt = (Sym(tail, False),)
            else:
                rest = ()
                for _ in range(item.max - item.min):
                    opt = self.fresh(f"{rule}_opt")
                    self.rules[opt] = [one + rest, ()]
                    rest = (Sym(opt, False),)
            self.rules[helper] = [one * item.min + rest]
        return Sym(helper, False)

    def lexeme(self, expr: Expr, rule: str) -> tuple[Sym, ...]:
        """Symbols for a regular expression: () if it matches only the empty string, a terminal, or an
        optional terminal (a helper rule) if it also matches the empty string."""
        tree = self.tree(expr)
        hit = self._by_tree.get(tree)
        if hit is not None:
            return hit
        name = f"T{len(self.terminals)}"
        shown = rx.show(tree)
        try:
            dfa = lower_char_fsm(rx.to_char_fsm(tree, shown), False)
        except (GrammarError, OverflowError) as e:
            raise GrammarError(f"rule {rule!r}: {e}") from None
        out: tuple[Sym, ...] = (Sym(name, True),)
        if dfa.accepting[dfa.start]:
            dfa = without_empty(dfa)
            if dfa.is_empty():
                self._by_tree[tree] = ()
                return ()
            opt = self.fresh(f"{rule}_opt")
            self.rules[opt] = [(Sym(name, True),), ()]
            out = (Sym(opt, False),)
        elif dfa.is_empty():
            raise GrammarError(f"rule {rule!r}: /{shown}/ matches nothing")
        term = Terminal(name, dfa, f"/{shown}/")
        self.terminals[name] = term
        self._by_tree[tree] = out
        return out

    def is_regular(self, e: Expr) -> bool:
        return all(r in self.regular for r in _refs(e))

    def tree(self, e: Expr) -> rx.Rx:
        """The regex tree of a regular expression (its references inlined)."""
        if isinstance(e, Lit):
            return rx.Lit(e.text)
        if isinstance(e, Cls):
            if not e.ranges:
                if not e.negated:
                    raise GrammarError("the character class [] matches nothing")
                return _ANY
            return rx.Cls(tuple(e.ranges), e.negated)
        if isinstance(e, AnyChar):
            return _ANY
        if isinstance(e, Ref):
            return self.tree(self.exprs[e.name])
        if isinstance(e, Seq):
            return rx.seq(*map(self.tree, e.items))
        if isinstance(e, Alt):
            return rx.alt(*map(self.tree, e.options))
        return rx.rep(self.tree(e.item), e.min, e.max)

    def fresh(self, base: str) -> str:
        k = 1
        while f"{base}{k}" in self.rules or f"{base}{k}" in self.exprs:
            k += 1
        self.rules[f"{base}{k}"] = []
        return f"{base}{k}"


def _refs(e: Expr) -> set[str]:
    if isinstance(e, Ref):
        return {e.name}
    if isinstance(e, (Seq, Alt)):
        out: set[str] = set()
        for i in (e.items if isinstance(e, Seq) else e.options):
            out |= _refs(i)
        return out
    if isinstance(e, Rep):
        return _refs(e.item)
    return set()


def _regular_rules(names: list[str], refs: dict[str, list[str]]) -> set[str]:
    """Rules that reach no recursion (so their language is regular and can be inlined as a regex)."""
    bad = set()
    for group in _sccs(names, refs):
        if len(group) > 1 or group[0] in refs[group[0]]:
            bad.update(group)
    regular: set[str] = set()
    for group in _sccs(names, refs):       # Tarjan's order: a rule's references come before it
        n = group[0]
        if n not in bad and all(r in regular for r in refs[n]):
            regular.add(n)
    return regular



