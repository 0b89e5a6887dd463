"""Structural tags: free text that switches into a constrained region when a trigger appears, then back, read
into rules (cfg_ir.py) as Lark and GBNF are, and lowered with them to the one grammar IR (lowering.py).

    {"structures": [{"begin": "<tool_call>", "schema": {...}, "end": "</tool_call>"}],
     "triggers": ["<tool_call>"]}                   (SGLang's / xgrammar's shape; "type": "structural_tag" optional)

Free text is any text in which no trigger occurs. Where one is completed, the text goes on as the `begin` of a
structure that starts with that trigger, then one JSON value under its schema, then its `end`, then free text
again. The text may end (EOS) only in free text. As a grammar, with one alternative per structure i:

    tags ::= "" | TEXT | UPTO_t BEGIN_i JSON_i END_i tags
    TEXT     non-empty text in which no trigger occurs (a byte DFA)
    UPTO_t   text whose first trigger occurrence ends at its last byte and is t, the shortest trigger that
             begin_i starts with (a longer one holds t, so t would end the free text first) (a byte DFA)
    BEGIN_i  the rest of begin_i after t (left out where empty), END_i its end: literals
    JSON_i   a subgrammar (cfg_ir.Subgrammar): the grammar IR of the structure's JSON Schema, embedded, so
             every constraint of the JSON path holds inside

TEXT and UPTO_t are one trigger automaton (Aho-Corasick over the triggers' bytes) whose bytes that complete a
trigger are dead (TEXT) or, where they complete t, lead to UPTO_t's one accepting state. It reads bytes, not
characters: free text need not be valid UTF-8 at every token boundary."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..automata.byte_dfa import ByteDFA, trimmed_dfa
from ..errors import GrammarError
from .cfg_ir import CfgIR, Subgrammar, Sym, Terminal, literal_terminal, without_empty


@dataclass(frozen=True)
class TagStructure:
    begin: str
    schema: Any
    end: str


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


def structural_tag_to_ir(structures: Sequence[TagStructure], triggers: Sequence[str], bodies: Sequence[Any]
                         ) -> CfgIR:
    """The rules of a structural tag; `bodies[i]` is structure i's JSON Schema as a GrammarIR."""
    trigs = [t.encode() for t in triggers]
    rows, prefixes = _trigger_automaton(trigs)
    text = without_empty(trimmed_dfa(rows, 0, [True] * len(rows), {}, [False] * len(rows)))
    shown = " ".join(json.dumps(t) for t in triggers)
    terminals: dict[str, Any] = {"TEXT": Terminal("TEXT", text, f"/text in which no trigger occurs: {shown}/")}
    literals: dict[str, str] = {}         # literal text -> its terminal's name (equal ends share one)

    def literal(name: str, text: str) -> Sym:
        name = literals.setdefault(text, name)
        if name not in terminals:
            terminals[name] = literal_terminal(name, text)
        return Sym(name, True)

    alts: list[tuple[Sym, ...]] = [(), (Sym("TEXT", True),)]
    for i, (s, body) in enumerate(zip(structures, bodies)):
        t = min((t for t in trigs if s.begin.encode().startswith(t)), key=len)
        upto = f"UPTO_{trigs.index(t)}"
        if upto not in terminals:
            dfa = _up_to(rows, prefixes, t)
            if dfa.is_empty():          # another trigger inside t always ends the free text first
                continue
            terminals[upto] = Terminal(upto, dfa, f"/text up to the first trigger, which is {json.dumps(t.decode())}/")
        rest = s.begin.encode()[len(t):].decode()
        alt = [Sym(upto, True)] + ([literal(f"BEGIN_{i}", rest)] if rest else [])
        terminals[f"JSON_{i}"] = Subgrammar(f"JSON_{i}", body, f"%json {json.dumps(s.schema, sort_keys=True)}")
        alts.append(tuple(alt + [Sym(f"JSON_{i}", True), literal(f"END_{i}", s.end), Sym("tags", False)]))
    return CfgIR({"tags": tuple(alts)}, terminals, "tags")


def _trigger_automaton(triggers: list[bytes]) -> tuple[list[list[int]], list[bytes]]:
    """Rows of the byte automaton of the texts in which no trigger occurs (256 targets each, -1 where the byte
    completes a trigger), and each state's text suffix: the longest that is a proper prefix of some trigger
    (Aho-Corasick). State 0 is the empty suffix."""
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
    return rows, prefixes


def _up_to(rows: list[list[int]], prefixes: list[bytes], trigger: bytes) -> ByteDFA:
    """UPTO for `trigger`: the trigger automaton, where a byte that completes `trigger` leads to an accepting
    state with no way out (the byte may complete another trigger too; the text ends there either way)."""
    final = len(rows)
    out = [list(r) for r in rows] + [[-1] * 256]
    for q, p in enumerate(prefixes):
        for b in range(256):
            if rows[q][b] < 0 and (p + bytes((b,))).endswith(trigger):
                out[q][b] = final
    return trimmed_dfa(out, 0, [False] * final + [True], {}, [False] * (final + 1))
