"""Property names of JSON objects: which names may come next, and the one key DFA per object that spells them.

Every object has a single key DFA whatever names it has seen: its accepting states are labelled with the
property name, `EXTRA` (another name) or ("*", matched pattern indices) (another name under
patternProperties). Which of those labels are still allowed depends on (names seen, name count); a DFA state is
allowed when it can still reach an allowed label (`allowed_states`). So a name that can only finish as one
already used or no longer feasible cannot be started, and the DFA's token classification is shared by every
position of the object.

Unique names (generation mode, `unique`): a declared name is in the Obj frame's `seen` once written; an
undeclared one (EXTRA or pattern label) is too, as its bytes, where `tracks_names` says so: the Key frame then
carries the name read so far, the parser refuses the closing quote of a name already seen, and masks drop the
tokens that would write it (stack_masks.py)."""
from __future__ import annotations

from typing import Hashable

import numpy as np

from ..automata.byte_dfa import ByteDFA
from ..automata.charfsm import label_product, literal_trie
from ..automata.dfa_lowering import lower_char_fsm
from ..automata.key_dfa import words_dfa
from ..ir.nodes import EXTRA, Node, ObjectNode
from ..vocab.token_index import TokenIndex

_MISSING = object()


class ObjectKeys:
    """Name logic for the objects of one grammar. Immutable apart from its caches (charged to the index's
    budget)."""

    def __init__(self, nodes: list[Node], sat: list[bool], canonical: bool, ordered: bool, unique: bool = False,
                 *, index: TokenIndex):
        # `ordered` (generation mode): named properties come in the schema's order, a required one is never
        # skipped, and other names only once every required one is there, so keys are forced text.
        # `unique` (generation mode): no name twice in one object, undeclared names included (see tracks_names)
        self.nodes, self.sat, self.canonical, self.ordered = nodes, sat, canonical, ordered
        self.unique = unique
        self._tracks: dict[int, bool] = {}
        self._dfas: dict[int, tuple[ByteDFA, dict, np.ndarray]] = {}
        # per (object, names seen, count): charged to the index's budget
        self._choices = index.cache("object name choices")
        self._allowed = index.cache("object name states")
        # key DFAs by names: shared by every grammar on the index (one object shape recurs across a service's
        # schemas: 1185 key DFAs for 400 MaskBench schemas were 680 distinct)
        self._names = index.derived_cache("object key DFAs")

    # --- which names ---------------------------------------------------------------------------------------
    def required(self, node: ObjectNode, seen: frozenset) -> frozenset:
        """Names that must appear given those seen: `required` plus dependentRequired, transitively."""
        req = node.required
        if not node.deps:
            return req
        while True:
            more = req.union(*(node.deps.get(n, ()) for n in seen | req))
            if more == req:
                return req
            req = more

    def _feasible(self, node: ObjectNode, seen: frozenset, nk: int) -> bool:
        need = self.required(node, seen) - seen
        if any(n not in node.props or not self.sat[node.props[n]] for n in need):
            return False
        last = self._last_rank(node, seen)
        if any(node.rank[n] < last for n in need):
            return False   # ordered: a required name was skipped
        missing = len(need)
        if node.max_props is not None and nk + missing > node.max_props:
            return False
        if nk + missing >= node.min_props:
            return True
        if self._others_possible(node):
            return True
        avail = sum(1 for n, v in node.props.items() if n not in seen and self.sat[v] and node.rank[n] > last)
        return nk + avail >= node.min_props

    def _last_rank(self, node: ObjectNode, seen: frozenset) -> int:
        """Ordered mode: schema position of the last named property written (-1: none, or not ordered)."""
        if not self.ordered:
            return -1
        return max((node.rank[n] for n in seen if n in node.rank), default=-1)

    def _others_possible(self, node: ObjectNode) -> bool:
        """Whether some name outside `properties` can have a valid value (additionalProperties or a pattern)."""
        if node.additional is not None and self.sat[node.additional]:
            return True
        return any(self.sat[v] for v in node.pattern_nodes.values())

    def can_close(self, node: ObjectNode, seen: frozenset, nk: int) -> bool:
        return self.required(node, seen) <= seen and nk >= node.min_props

    def choices(self, nid: int, seen: frozenset, nk: int) -> tuple[dict, bool] | None:
        """(allowed named properties, whether other names are allowed) for the next property; None if none.
        Cached."""
        key = (nid, seen, nk)
        hit = self._choices.get(key, _MISSING)
        if hit is not _MISSING:
            return hit
        node = self.nodes[nid]
        out = None
        if node.max_props is None or nk + 1 <= node.max_props:
            last = self._last_rank(node, seen)
            named = {n: n for n, v in node.props.items() if n not in seen and node.rank[n] > last and
                     self.sat[v] and self._feasible(node, seen | {n}, nk + 1)}
            extra = self._others_possible(node) and self._feasible(node, seen, nk + 1) and \
                (not self.ordered or self.required(node, seen) <= seen)
            if named or extra:
                out = (named, extra)
        self._choices[key] = out
        return out

    # --- the key DFA -----------------------------------------------------------------------------------------
    def build_all(self) -> None:
        """Build every satisfiable object's key DFA now (at compile time) rather than on its first mask."""
        for nid, node in enumerate(self.nodes):
            if isinstance(node, ObjectNode) and self.sat[nid]:
                try:
                    self._dfa_entry(nid)
                except OverflowError:   # too big: it fails where it is used, as before
                    pass

    def built(self) -> list[ByteDFA]:
        return [entry[0] for entry in self._dfas.values()]

    def dfa(self, nid: int) -> ByteDFA:
        """The object's key DFA (JSON strings with quotes), built on first use."""
        return self._dfa_entry(nid)[0]

    def _dfa_entry(self, nid: int) -> tuple[ByteDFA, dict, np.ndarray]:
        hit = self._dfas.get(nid)
        if hit is None:
            node = self.nodes[nid]
            if node.patterns:
                dfa = self._pattern_dfa(node)
                hit = (dfa, *label_reach(dfa))
            else:
                hit = self._names_entry(tuple(sorted(node.props)),
                                        node.additional is not None and self.sat[node.additional])
            self._dfas[nid] = hit
        return hit

    def _names_entry(self, names: tuple[str, ...], others: bool) -> tuple[ByteDFA, dict, np.ndarray]:
        """The key DFA (and label_reach) of an object whose names are `names` (sorted), plus any other name
        when `others`; shared through the index (the DFA is immutable and depends on nothing else)."""
        key = (names, others, self.canonical)
        hit = self._names.get(key)
        if hit is None:
            dfa = words_dfa({n: n for n in names}, EXTRA if others else None, canonical=self.canonical)
            hit = (dfa, *label_reach(dfa))
            hit[2].flags.writeable = False   # shared between grammars
            hit = self._names.put(key, hit, nbytes=dfa.nbytes() + hit[2].nbytes)
        return hit

    def _pattern_dfa(self, node: ObjectNode) -> ByteDFA:
        """Names for an object with patternProperties: the product of the name trie with every pattern, labelled
        (name) or ("*", matched pattern indices); names whose value could never be valid are not accepted."""
        trie = literal_trie({n: n for n in node.props}, EXTRA)
        pats = list(node.patterns)

        def label(states):
            tl = trie.finals.get(states[0])
            if tl is not EXTRA:
                return tl
            matched = frozenset(i for i, (p, s) in enumerate(zip(pats, states[1:])) if s >= 0 and s in p.finals)
            v = node.other_node(matched)
            return ("*", matched) if v is not None and self.sat[v] else None
        fsm = label_product([trie] + pats, label)
        return lower_char_fsm(fsm, json_string=True, canonical=self.canonical)

    def allowed_states(self, nid: int, seen: frozenset, nk: int) -> tuple[np.ndarray, list[bool]]:
        """bool [num_states + 1] (last: dead) and the same as a list: key DFA states from which a name still
        allowed after (seen, nk) can be reached. Cached."""
        node = self.nodes[nid]
        key = (nid, seen, nk if node.min_props or node.max_props is not None else 0)
        hit = self._allowed.get(key)
        if hit is None:
            _, bit, reach = self._dfa_entry(nid)
            want = np.zeros(reach.shape[1], np.uint64)
            ch = self.choices(nid, seen, nk)
            for label, i in bit.items():
                if ch is not None and (label in ch[0] or (ch[1] and (label is EXTRA or isinstance(label, tuple)))):
                    want[i >> 6] |= np.uint64(1 << (i & 63))
            ok = (reach & want).any(axis=1)
            hit = self._allowed.put(key, (ok, ok.tolist()))
        return hit

    def tracks_names(self, nid: int) -> bool:
        """Whether undeclared names of object `nid` are recorded so that none repeats: in unique mode, for an
        object that allows them, when every unfinished name that could end as an undeclared one has infinitely
        many such endings (so a finite set of names seen never leaves a started name without one; a pattern
        naming finitely many names, e.g. `^(a|b)$`, is left untracked and may repeat). Cached."""
        hit = self._tracks.get(nid)
        if hit is None:
            node = self.nodes[nid]
            hit = self.unique and self._others_possible(node) and _other_names_unbounded(self.dfa(nid))
            self._tracks[nid] = hit
        return hit

    def finish(self, nid: int, seen: frozenset, nk: int, s: int, name: bytes = b"") -> tuple[frozenset, int] | None:
        """(names seen, value node) after the name ending in accepting key-DFA state s; None if not allowed.
        `name`: the name's bytes, recorded in the names seen if it is undeclared (b"": record nothing)."""
        node = self.nodes[nid]
        label = self.dfa(nid).labels[s]
        ch = self.choices(nid, seen, nk)
        if ch is None:
            return None
        if label is EXTRA or isinstance(label, tuple):
            if not ch[1] or name in seen:
                return None
            return seen | {name} if name else seen, node.additional if label is EXTRA else node.other_node(label[1])
        if label not in ch[0]:
            return None
        return seen | {label}, node.props[label]


def _other_names_unbounded(dfa: ByteDFA) -> bool:
    """Whether from every non-accepting key-DFA state that can end as an undeclared name (EXTRA or pattern
    label), infinitely many such names can be completed: each reaches a cycle from which one is reachable."""
    n = dfa.num_states
    src, dst = (a.tolist() for a in dfa.edges)
    into: list[list[int]] = [[] for _ in range(n)]
    out: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src, dst):
        into[b].append(a)
        out[a].append(b)

    def backward(seeds: list[int], within) -> set[int]:
        done, todo = set(seeds), list(seeds)
        while todo:
            for a in into[todo.pop()]:
                if a not in done and within(a):
                    done.add(a)
                    todo.append(a)
        return done
    other = [s for s, label in dfa.labels.items()
             if dfa.accepting_list[s] and (label is EXTRA or isinstance(label, tuple))]
    live = backward(other, lambda a: True)                  # states that can still end as an undeclared name
    # a state of `live` on a cycle inside `live`: it reaches itself
    cyclic = []
    for s in live:
        before = backward([s], live.__contains__)      # s itself and the states that reach it
        if any(t in before for t in out[s]):
            cyclic.append(s)
    unbounded = backward(cyclic, live.__contains__)
    return all(s in unbounded for s in live if not dfa.accepting_list[s])


def label_reach(dfa: ByteDFA) -> tuple[dict[Hashable, int], np.ndarray]:
    """(label -> bit, uint64 [num_states + 1, words]): the labels of accepting states reachable from each
    state, as bitsets (last row: dead, nothing). A fixpoint over the DFA's distinct edges."""
    n = dfa.num_states
    bit: dict[Hashable, int] = {}
    for s, label in dfa.labels.items():
        if dfa.accepting_list[s] and label is not None:
            bit.setdefault(label, len(bit))
    reach = np.zeros((n + 1, max(1, (len(bit) + 63) // 64)), np.uint64)
    for s, label in dfa.labels.items():
        if dfa.accepting_list[s] and label is not None:
            i = bit[label]
            reach[s, i >> 6] |= np.uint64(1 << (i & 63))
    src, dst = dfa.edges            # sorted by source
    if src.size == 0:
        return bit, reach
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    heads = src[starts]
    while True:
        new = reach[heads] | np.bitwise_or.reduceat(reach[dst], starts, axis=0)
        if (new == reach[heads]).all():
            return bit, reach
        reach[heads] = new
