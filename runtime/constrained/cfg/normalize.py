"""Rewrite a CfgIR, keeping its language, into the form the top-down parser (parser/parser.py, after
lowering.py) runs: every rule defined and productive, no empty alternatives (the empty string survives only as
`$start`'s empty alternative), no cycles of unit rules, no left recursion (left-recursive rules become `A ::= b A_tail`,
`A_tail ::= a A_tail | ""`, Paull's algorithm within each left-recursive group of rules), and alternatives
left-factored (empty alternatives come back there, as rule ends only). The parser only
recognises, so rewriting the parse trees is fine; what must hold is the set of strings."""
from __future__ import annotations

from itertools import product

from ..errors import GrammarError
from .cfg_ir import Alt, CfgIR, Sym

START = "$start"
_MAX_ALTS = 100_000        # alternatives in all, after rewriting
_CHAIN_NULLABLE = 3        # an alternative with more nullable symbols than this is split into a chain first


def normalize(ir: CfgIR) -> CfgIR:
    """The rewritten grammar; its start rule is `$start`. Raises GrammarError naming the rule at fault."""
    _check_defined(ir)
    rules = {name: list(dict.fromkeys(alts)) for name, alts in ir.rules.items()}
    order = list(rules)
    _keep_productive(rules, ir.start)
    _keep_reachable(rules, ir.start, order)
    nullable = _nullable(rules)
    _chain_nullable(rules, nullable)
    start_nullable = ir.start in nullable
    _remove_empty(rules, nullable)
    start = ir.start
    if not rules.get(start):
        # the start rule derives only the empty string
        rules = {}
    else:
        start = _collapse_unit_cycles(rules, start)
        _remove_left_recursion(rules)
        _left_factor(rules)
    start_alts = ((Sym(start, False),),) if rules else ()
    rules = {START: start_alts + (((),) if start_nullable else ()), **{k: tuple(v) for k, v in rules.items()}}
    _check_no_left_recursion(rules)
    return CfgIR(rules, ir.terminals, START, ir.ignore)


def _check_defined(ir: CfgIR) -> None:
    if ir.start not in ir.rules:
        raise GrammarError(f"the start rule {ir.start!r} is not defined")
    for name, alts in ir.rules.items():
        for alt in alts:
            for s in alt:
                if s.terminal and s.name not in ir.terminals:
                    raise GrammarError(f"terminal {s.name!r} used in rule {name!r} is not defined")
                if not s.terminal and s.name not in ir.rules:
                    raise GrammarError(f"rule {s.name!r} used in rule {name!r} is not defined")
    for name in ir.ignore:
        if name not in ir.terminals:
            raise GrammarError(f"ignored terminal {name!r} is not defined")


def _keep_productive(rules: dict[str, list[Alt]], start: str) -> None:
    """Drop alternatives that use a rule deriving no finite string, and such rules."""
    good: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alts in rules.items():
            if name not in good and any(all(s.terminal or s.name in good for s in a) for a in alts):
                good.add(name)
                changed = True
    if start not in good:
        raise GrammarError(f"rule {start!r} derives no finite string (each alternative needs itself again)")
    for name in list(rules):
        if name not in good:
            del rules[name]
        else:
            rules[name] = [a for a in rules[name] if all(s.terminal or s.name in good for s in a)]


def _keep_reachable(rules: dict[str, list[Alt]], start: str, order: list[str]) -> None:
    seen, todo = {start}, [start]
    while todo:
        for a in rules[todo.pop()]:
            for s in a:
                if not s.terminal and s.name not in seen:
                    seen.add(s.name)
                    todo.append(s.name)
    for name in order:
        if name in rules and name not in seen:
            del rules[name]


def _nullable(rules: dict[str, list[Alt]]) -> set[str]:
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alts in rules.items():
            if name not in out and any(all(not s.terminal and s.name in out for s in a) for a in alts):
                out.add(name)
                changed = True
    return out


def _chain_nullable(rules: dict[str, list[Alt]], nullable: set[str]) -> None:
    """Split alternatives with many nullable symbols into a right chain of two-symbol rules, so removing the
    empty string (which makes 2^k variants of an alternative with k nullable symbols) stays linear."""
    for name in list(rules):
        out = []
        for alt in rules[name]:
            if sum(not s.terminal and s.name in nullable for s in alt) <= _CHAIN_NULLABLE:
                out.append(alt)
                continue
            rest = alt[-1:]
            for k in range(len(alt) - 2, 0, -1):
                link = _fresh(rules, f"{name}_part")
                rules[link] = [(alt[k],) + rest]
                if all(not s.terminal and s.name in nullable for s in (alt[k],) + rest):
                    nullable.add(link)
                rest = (Sym(link, False),)
            out.append(alt[:1] + rest)
        rules[name] = out


def _remove_empty(rules: dict[str, list[Alt]], nullable: set[str]) -> None:
    """Every alternative once with and once without each nullable symbol; empty alternatives dropped, and
    rules left with none (they derive only the empty string) removed with the alternatives that use them."""
    for name in list(rules):
        variants: list[Alt] = []
        for alt in rules[name]:
            choices = [((s,), ()) if not s.terminal and s.name in nullable else ((s,),) for s in alt]
            for pick in product(*choices):
                v = tuple(s for part in pick for s in part)
                if v:
                    variants.append(v)
        rules[name] = list(dict.fromkeys(variants))
        _check_size(rules, name)
    while True:
        empty = {n for n, alts in rules.items() if not alts}
        if not empty:
            return
        for n in empty:
            del rules[n]
        for name in rules:
            rules[name] = [a for a in rules[name] if not any(not s.terminal and s.name in empty for s in a)]


def _collapse_unit_cycles(rules: dict[str, list[Alt]], start: str) -> str:
    """Rules that reach each other by unit rules (`A ::= B`) derive the same strings: merge each such group
    into its first rule. Returns the start rule's name after merging."""
    edges = {n: [a[0].name for a in alts if len(a) == 1 and not a[0].terminal] for n, alts in rules.items()}
    rename: dict[str, str] = {}
    for group in _sccs(list(rules), edges):
        if len(group) > 1:
            for n in group[1:]:
                rename[n] = group[0]
    if not rename:
        return start
    merged: dict[str, list[Alt]] = {}
    for name, alts in rules.items():
        target = rename.get(name, name)
        for a in alts:
            a = tuple(Sym(rename.get(s.name, s.name), False) if not s.terminal else s for s in a)
            if a != (Sym(target, False),):
                merged.setdefault(target, []).append(a)
    rules.clear()
    rules.update({n: list(dict.fromkeys(a)) for n, a in merged.items()})
    return rename.get(start, start)


def _remove_left_recursion(rules: dict[str, list[Alt]]) -> None:
    """Paull's algorithm within each group of rules that are left corners of each other (no empty alternatives
    here, so a left corner is an alternative's first symbol), with right-recursive tails."""
    edges = {n: [a[0].name for a in alts if a and not a[0].terminal] for n, alts in rules.items()}
    for group in _sccs(list(rules), edges):
        if len(group) == 1 and group[0] not in edges[group[0]]:
            continue
        for i, ai in enumerate(group):
            alts = rules[ai]
            for aj in group[:i]:
                new: list[Alt] = []
                for a in alts:
                    if a[0] == Sym(aj, False):
                        new.extend(d + a[1:] for d in rules[aj])
                    else:
                        new.append(a)
                alts = list(dict.fromkeys(new))
                if len(alts) > _MAX_ALTS // 10:
                    raise GrammarError(f"left recursion through rules {group} is too large to rewrite "
                                       f"({len(alts)} alternatives of {ai!r})")
            me = Sym(ai, False)
            rec = [a[1:] for a in alts if a[0] == me and len(a) > 1]
            base = [a for a in alts if a[0] != me]
            if not rec:
                rules[ai] = alts
                continue
            if not base:
                raise GrammarError(f"rule {ai!r} is left-recursive in every alternative: it derives no finite "
                                   "string")
            tail = _fresh(rules, f"{ai}_tail")
            rules[ai] = [b + (Sym(tail, False),) for b in base]
            rules[tail] = [r + (Sym(tail, False),) for r in rec] + [()]
            _check_size(rules, ai)


def _left_factor(rules: dict[str, list[Alt]]) -> None:
    """Alternatives of a rule that start alike share that start: `A ::= x y | x z` becomes `A ::= x A_rest`,
    `A_rest ::= y | z`. The parser keeps one stack where it would keep one per alternative (Lark writes `a?
    b? c?` as all 8 combinations)."""
    todo = list(rules)
    while todo:
        name = todo.pop()
        groups: dict[Sym, list[Alt]] = {}
        for a in rules[name]:
            if a:
                groups.setdefault(a[0], []).append(a)
        if all(len(g) == 1 for g in groups.values()):
            continue
        new: list[Alt] = [a for a in rules[name] if not a]
        for g in groups.values():
            if len(g) == 1:
                new.extend(g)
                continue
            k = 1
            while all(len(a) > k for a in g) and len({a[k] for a in g}) == 1:
                k += 1
            rest = _fresh(rules, f"{name}_rest")
            rules[rest] = list(dict.fromkeys(a[k:] for a in g))
            new.append(g[0][:k] + (Sym(rest, False),))
            todo.append(rest)
        rules[name] = new


def _check_no_left_recursion(rules: dict[str, tuple[Alt, ...]]) -> None:
    """The rewrite must leave no rule that is its own left corner (counting nullable prefixes): the parser's
    prediction would never end. A failure here names the rules."""
    nullable = _nullable({k: list(v) for k, v in rules.items()})
    edges: dict[str, list[str]] = {}
    for name, alts in rules.items():
        out = edges[name] = []
        for a in alts:
            for s in a:
                if s.terminal:
                    break
                out.append(s.name)
                if s.name not in nullable:
                    break
    for group in _sccs(list(rules), edges):
        if len(group) > 1 or group[0] in edges[group[0]]:
            raise GrammarError(f"cannot remove the left recursion through rules {group}: rewrite them without "
                               "a nullable prefix before the recursive rule")


def _check_size(rules: dict[str, list[Alt]], name: str) -> None:
    if len(rules[name]) > _MAX_ALTS // 10:
        raise GrammarError(f"rule {name!r} expands to {len(rules[name])} alternatives: too large to compile")


def _fresh(rules: dict, base: str) -> str:
    name, k = base, 1
    while name in rules:
        k += 1
        name = f"{base}{k}"
    return name


def _sccs(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's, iterative), each listed in `nodes` order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    pos = {n: i for i, n in enumerate(nodes)}
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    out.append(sorted(group, key=pos.__getitem__))
    return out
