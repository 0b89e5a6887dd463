"""Closing at the token budget: the shortest completion of a parse state, its first bytes, and its cost in tokens.

A constrained generation that reaches `max_new_tokens` mid-value returns text that does not parse. When a
request's remaining budget comes down to what the shortest completion costs, the matcher
(`GrammarMatcher.closing_words`) offers only the single-byte tokens that begin one, a byte per token, and
jump-forward writes the forced runs, so the value ends, valid, within the budget. The model still chooses among
the bytes that are equally short (which quote or bracket, which digit of a required number).

The search is breadth-first over parse states (tuples of stacks), a byte per level, only as deep as the
caller's horizon. States that differ only in counts that cannot shorten a completion (a string's length past its
minimum, ...: `_coarse`) are one state, visited once. It is a beam search: each level keeps the first `beam` new
states; each state tries enders (quotes, brackets) first, one byte per next lexeme state (bytes that move a
lexeme's DFA to the same state lead to the same stack but for a count), and neither whitespace, escapes nor
multi-byte characters where anything else may come. So the depth it returns is exact whenever no level overflows
the beam, and otherwise an upper bound: a completion of that many bytes exists, it may not be the shortest.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol
from weakref import WeakKeyDictionary

from ..cache import LruCache

from .frames import Arr, Key, Lex, Obj

_WS = frozenset(b" \t\n\r")
_LONG = frozenset([0x5C, *range(0x80, 0x100)])   # an escape or a multi-byte character: more bytes for one char
# bytes that end something, tried first: a string, an array, an object; then separators
_ENDERS = (0x22, 0x5D, 0x7D, 0x3A, 0x2C)


class _Runnable(Protocol):
    """The part of matcher.CompiledGrammar the search reads (the matcher imports this module, not the reverse)."""
    nodes: tuple
    index: object             # the vocabulary (TokenIndex): its trie prices forced text in tokens

    def run(self, stacks, data: bytes) -> list: ...
    def accepting(self, stack) -> bool: ...
    def next_bytes(self, stack) -> frozenset: ...


# per grammar, in an LruCache charged to its index's budget: coarse state -> the Closing found, or (None, depth)
# searched that deep in vain. A grammar is shared by every request that uses it, and generations pass the same
# places of a schema again and again (with the counts folded, a string being written is one state however long it
# gets), so most searches are lookups.
_CACHES: "WeakKeyDictionary[object, LruCache]" = WeakKeyDictionary()


class Closing(NamedTuple):
    """A shortest completion: `depth` bytes (0: the grammar accepts already), `first` the first bytes of the
    completions of that length found, `tokens` what writing one costs when forced text goes by jump-forward (a
    token per byte where there is a choice, the vocabulary's longest tokens along forced runs)."""
    depth: int
    first: frozenset
    tokens: int


def closing_bytes(g: _Runnable, stacks: tuple, horizon: int, beam: int = 16,
                  max_steps: int = 1000) -> Closing | None:
    """The shortest completion of `stacks` (Closing), or None when none is found within `horizon` bytes, or
    within `max_steps` parser steps (which bounds the search's time: ~2 us a step; a state that needs more is
    not searched again). Results are cached per grammar and (coarse) state."""
    cache = _CACHES.get(g)
    if cache is None:
        cache = _CACHES.setdefault(g, g.index.cache("closings"))
    stacks = tuple(stacks)
    key = _coarse(g, stacks)
    hit = cache.get(key)
    if hit is not None:
        if hit[0] is not None:
            return hit if hit.depth <= horizon else None
        if horizon <= hit[1]:           # searched as far before, in vain
            return None
    found, searched = _search(g, stacks, key, horizon, beam, max_steps)
    if found is not None:
        cache[key] = found
    elif searched > (hit[1] if hit is not None else 0):
        cache[key] = (None, searched)
    return found


def _search(g: _Runnable, start: tuple, start_key: tuple, horizon: int, beam: int,
            max_steps: int) -> tuple[Closing | None, int]:
    """(closing_bytes' answer, the depth up to which none is to be found: every level was searched that far, or
    unbounded when the search ran out of steps, which it would again)."""
    if any(g.accepting(s) for s in start):
        return Closing(0, frozenset(), 0), 0
    seen = {start_key}
    layer: list[tuple[tuple, frozenset, bytes]] = [(start, frozenset(), b"")]   # (state, first bytes, a path)
    for depth in range(1, horizon + 1):
        nxt: dict[tuple, tuple[tuple, frozenset, bytes]] = {}                  # coarse key -> the same
        done: set[int] = set()
        path_done = b""
        for state, first, path in layer:
            cands = _candidates(g, state)
            max_steps -= len(cands)
            if max_steps < 0:           # too wide to search: a deeper horizon would not fare better
                return None, 1 << 30
            for b in cands:
                after = g.run(state, bytes((b,)))
                if not after:
                    continue
                key = tuple(after)
                via = first or frozenset((b,))
                if any(g.accepting(s) for s in key):
                    done |= via
                    path_done = path_done or path + bytes((b,))
                ck = _coarse(g, key)
                if ck in nxt:
                    nxt[ck] = (nxt[ck][0], nxt[ck][1] | via, nxt[ck][2])
                elif ck not in seen and len(nxt) < beam:
                    nxt[ck] = (key, via, path + bytes((b,)))
        if done:
            return Closing(depth, frozenset(done), _token_cost(g, start, path_done)), depth - 1
        if not nxt:
            return None, 1 << 30       # no completion at any depth
        seen.update(nxt)
        layer = list(nxt.values())
    return None, horizon


def _token_cost(g: _Runnable, state: tuple, path: bytes) -> int:
    """Tokens to write `path` from `state`: one per byte where the grammar allows other bytes too (a closing
    mask offers single-byte tokens there), and along each forced run (one next byte only, which jump-forward
    appends) the count of a longest-match tokenization, as the vocabulary's trie gives it."""
    index = g.index
    cost, run = 0, bytearray()
    for b in path:
        if len(_next_bytes(g, state)) == 1:
            run.append(b)
        else:
            cost += _longest_match_tokens(index, bytes(run)) + 1
            run.clear()
        state = tuple(g.run(state, bytes((b,))))
    return cost + _longest_match_tokens(index, bytes(run))


def _longest_match_tokens(index, data: bytes) -> int:
    """Tokens in a greedy longest-match split of `data` over the vocabulary trie."""
    n, i = 0, 0
    while i < len(data):
        node, j, last = 0, i, i + 1
        while j < len(data):
            node = index.children[node].get(data[j])
            if node is None:
                break
            j += 1
            if index.ends[node]:
                last = j
        n += 1
        i = last
    return n


def _next_bytes(g: _Runnable, state: tuple) -> set[int]:
    """The bytes that may come next from any of `state`'s stacks."""
    out: set[int] = set()
    for s in state:
        out |= g.next_bytes(s)
    return out


def _lexeme_dfa(g: _Runnable, state: tuple):
    """The DFA of the lexeme open on top of `state`'s one stack (a value's or a property name's), else None."""
    if len(state) != 1:
        return None
    top = state[0][-1]
    if type(top) is Lex:
        return g.nodes[top.node].dfa
    if type(top) is Key:                # only JSON grammars (parser.Grammar) have property names
        return g.parser.keys.dfa(top.node)
    return None


def _coarse(g: _Runnable, state: tuple) -> tuple:
    """`state` with what cannot shorten a completion forgotten: a string's characters, an array's items and an
    object's properties past their minimum (where no maximum makes the count matter), the text of a property
    name being written (which only the uniqueness of names can make matter). States equal here have the same
    shortest completion, so the search visits each once (a string growing character by character is one state,
    not one per length)."""
    nodes = g.nodes
    out = []
    for st in state:
        fs = []
        for f in st:
            k = type(f)
            if k is Lex and f.nchars:
                f = f._replace(nchars=min(f.nchars, nodes[f.node].min_chars))
            elif k is Arr and f.index and not nodes[f.node].counts:
                n = nodes[f.node]
                f = f._replace(index=min(f.index, max(len(n.prefix), n.min_items)))
            elif k is Key and f.name:
                f = f._replace(name=b"")
            elif k is Obj and f.nkeys and nodes[f.node].max_props is None:
                f = f._replace(nkeys=min(f.nkeys, nodes[f.node].min_props))
            fs.append(f)
        out.append(tuple(fs))
    return tuple(out)


def _candidates(g: _Runnable, state: tuple) -> list[int]:
    """The next bytes of `state` worth trying, enders first: whitespace only where nothing else may come, and
    one byte per DFA state it leads to where a lexeme is open (the others reach the same stack but for a count)."""
    allowed = _next_bytes(g, state)
    for detour in (_WS, _LONG):   # never on a shortest path while anything else may come
        if not allowed <= detour:
            allowed -= detour
    order = [b for b in _ENDERS if b in allowed] + sorted(allowed.difference(_ENDERS))
    dfa = _lexeme_dfa(g, state)
    if dfa is None:
        return order
    row = dfa.table_list[state[0][-1].state]
    seen: set[int] = set()
    out = []
    for b in order:
        to = row[b]
        if to < 0 or to not in seen:      # a byte that leaves the lexeme (to < 0) is tried on its own
            if to >= 0:
                seen.add(to)
            out.append(b)
    return out
