"""Complement of a character automaton (`not {pattern}`, patterns that must not match)."""
from __future__ import annotations

from .charfsm import ANY_CHAR, CharFSM, complement as uncovered, make_ranges


def complement_fsm(fsm: CharFSM) -> CharFSM:
    """Accepts exactly the strings `fsm` rejects: every state is completed with a rejecting sink (the last
    state) and acceptance is flipped. `fsm` must be deterministic (a CharFSM is)."""
    sink = fsm.num_states
    trans = []
    for ranges in fsm.trans:
        gaps = uncovered([(a, b) for a, b, _ in ranges])
        trans.append(make_ranges(list(ranges) + [(a, b, sink) for a, b in gaps]))
    trans.append(tuple((a, b, sink) for a, b in ANY_CHAR))
    finals = {s: True for s in range(sink + 1) if s not in fsm.finals}
    return CharFSM(fsm.initial, tuple(trans), finals)
