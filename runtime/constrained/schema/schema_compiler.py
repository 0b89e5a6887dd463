"""JSON Schema -> grammar IR nodes. Each sub-schema becomes a small node (lexeme DFA, object, array, union);
`$ref` targets are compiled once and referenced by index, so recursive and large schemas stay bounded.

Exactness rules: a keyword is either enforced exactly or raises UnsupportedSchemaError with its JSON pointer.
Type-specific keywords constrain only values of their type (as the spec says). `allOf` is merged keyword by
keyword (merge.py); `anyOf`/`oneOf` siblings are distributed into the alternatives; `oneOf` is accepted
only when its alternatives are provably disjoint (disjoint.py); `not` is rewritten into positive keywords
(negation.py). What remains is lowered per type: literals.py (null, boolean, enum/const), numbers.py,
strings.py, containers.py."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..automata.byte_dfa import ByteDFA
from ..automata.charfsm import ANY_CHAR, CharFSM
from ..automata.dfa_lowering import lower_char_fsm
from ..automata.digit_cap import cap_digit_runs, is_number_dfa
from ..automata import rx
from ..automata.json_numbers import NUMBER
from ..automata.regex import RegexUnsupported, regex_to_char_fsm
from ..budget import checkpoint
from ..errors import GrammarError, UnsupportedSchemaError
from ..ir.nodes import ArrayNode, LexNode, NeverNode, Node, ObjectNode, UnionNode
from .containers import lower_array, lower_object
from .disjoint import check_disjoint
from .document import SchemaDocument
from .json_values import KINDS
from .keywords import TYPES, check_supported, constraints, type_list
from .literals import lower_boolean, lower_enum, lower_null
from .merge import merge_all
from .numbers import lower_integer, lower_number
from .rewrite import needs_rewrite, rewrite
from .strings import lower_string

MAX_NODES = 20_000
# per JSON type, in the order the alternatives of a multi-type schema are added
LOWERINGS = {"null": lower_null, "boolean": lower_boolean, "integer": lower_integer, "number": lower_number,
             "string": lower_string, "array": lower_array, "object": lower_object}


class SchemaCompiler:
    """One compilation: a root schema document -> IR nodes and the root's index. `nodes` only grows; a node's
    index is final once added (a `$ref` slot is added first and filled when its target is compiled)."""

    def __init__(self, root: Any, dfa_cache: dict, canonical: bool = False, close_objects: bool = False):
        self.doc = SchemaDocument(root)
        self.canonical = canonical   # generation mode: no needless escapes in strings, capped digit runs
        self.close_objects = close_objects   # generation mode: see GrammarCompiler.compile_json_schema
        self.nodes: list[Node] = []
        self.refs: dict[str, int] = {}     # JSON pointer of a $ref target -> its node
        self.dfas = dfa_cache              # shared between compilations: keys name everything a DFA depends on
        self.any_id: Optional[int] = None

    # --- nodes and lexeme DFAs -------------------------------------------------------------------------------------
    def add(self, node: Node) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise GrammarError(f"schema too large: more than {MAX_NODES} grammar nodes")
        if self.canonical and isinstance(node, LexNode) and is_number_dfa(node.dfa):
            d = node.dfa   # generation mode: at most NUMBER_DIGITS digits in a row (see digit_cap)
            node = replace(node, dfa=self.dfa(("digit_cap", d.key), lambda: cap_digit_runs(d)))
        self.nodes.append(node)
        return len(self.nodes) - 1

    def dfa(self, key: tuple, build) -> ByteDFA:
        key = key + (self.canonical,)
        d = self.dfas.get(key)
        if d is None:
            d = self.dfas[key] = build()
        return d

    def regex_dfa(self, pattern: str, json_string: bool, search: bool, ptr: str, kw: str) -> ByteDFA:
        def build():
            try:
                return lower_char_fsm(regex_to_char_fsm(pattern, search), json_string, self.canonical)
            except RegexUnsupported as e:
                raise UnsupportedSchemaError(kw, ptr, str(e)) from None
            except OverflowError as e:
                raise GrammarError(f"{kw} at {ptr}: {e}") from None
        return self.dfa(("re", pattern, json_string, search), build)

    def lex(self, tree: rx.Rx, source: Optional[str] = None) -> int:
        """A lexeme node matching regex tree `tree`, printed as `source` (default: the tree as /regex/)."""
        def build():
            try:
                return lower_char_fsm(rx.to_char_fsm(tree), False, self.canonical)
            except OverflowError as e:
                raise GrammarError(f"{source or rx.show(tree)}: {e}") from None
        return self.add(LexNode(self.dfa(("rx", tree), build), source=source or f"/{rx.show(tree)}/"))

    def never(self) -> int:
        return self.add(NeverNode())

    def any(self) -> int:
        if self.any_id is None:
            self.any_id = self.add(UnionNode(()))
            s = self.plain_string(0, None)
            alts = (self.lex(rx.Lit("null"), '"null"'), self.lex(rx.words(("true", "false")), '"true" | "false"'),
                    self.lex(NUMBER, "number"), s,
                    self.add(ArrayNode((), self.any_id)), self.add(ObjectNode({}, frozenset(), self.any_id)))
            self.nodes[self.any_id] = UnionNode(alts)
        return self.any_id

    def plain_string(self, min_len: int, max_len: Optional[int]) -> int:
        d = self.dfa(("string",), lambda: lower_char_fsm(
            CharFSM(0, (tuple((a, b, 0) for a, b in ANY_CHAR),), {0: True}), True, self.canonical))
        return self.add(LexNode(d, min_len, max_len, source="string"))

    # --- schemas ---------------------------------------------------------------------------------------------------
    def ref_node(self, ref: str, ptr: str) -> int:
        target, tptr = self.doc.resolve(ref, ptr)
        if tptr in self.refs:
            return self.refs[tptr]
        slot = self.add(UnionNode(()))
        self.refs[tptr] = slot
        self.nodes[slot] = UnionNode((self.compile(target, tptr),))
        return slot

    def compile(self, schema: Any, ptr: str = "#") -> int:
        if schema is True or schema == {}:
            return self.any()
        if schema is False:
            return self.never()
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {ptr} must be an object or boolean, got {type(schema).__name__}")
        checkpoint(f"the schema at {ptr}")
        check_supported(schema, ptr)
        if "$ref" in schema:
            rest = self.doc.ref_siblings(schema)
            if "unevaluatedProperties" in rest or "unevaluatedItems" in rest:
                return self.compile(rewrite(self.doc, schema, ptr), ptr)   # they see into the target
            if not rest:
                return self.ref_node(schema["$ref"], ptr)
            return self.compile({"allOf": [{"$ref": schema["$ref"]}, rest]}, ptr)
        if needs_rewrite(schema):
            r = rewrite(self.doc, schema, ptr)
            if r != schema:
                return self.compile(r, ptr)
        if "allOf" in schema:
            return self.compile(merge_all(self.doc, schema, ptr), ptr)
        for kw in ("anyOf", "oneOf"):
            if kw in schema:
                alts = schema[kw]
                if not isinstance(alts, list) or not alts:
                    raise GrammarError(f"{kw} at {ptr} must be a non-empty array")
                rest = constraints(schema, kw)
                subs = []
                for i, a in enumerate(alts):
                    a_ptr = f"{ptr}/{kw}/{i}"
                    if rest:
                        a_res, _ = self.doc.deref(a, a_ptr)
                        subs.append(({"allOf": [rest, a_res]}, a_ptr))
                    else:
                        subs.append((a, a_ptr))
                if kw == "oneOf":
                    check_disjoint(self.doc, [s for s, _ in subs], ptr)
                ids = [self.compile(s, p) for s, p in subs]
                return self.add(UnionNode(tuple(ids)))
        return self.compile_flat(schema, ptr)

    def compile_flat(self, schema: dict, ptr: str) -> int:
        """A schema without applicators ($ref/allOf/anyOf/oneOf) or rewritten keywords (rewrite.py)."""
        if "const" in schema or "enum" in schema:
            return lower_enum(self, schema, ptr)
        types = schema.get("type")
        if types is None:
            kinds = set(KINDS) | {"integer"}
        else:
            tl = type_list(types)
            for t in tl:
                if t not in TYPES:
                    raise GrammarError(f"unknown type {t!r} at {ptr}/type")
            kinds = set(tl)
        if "number" in kinds:
            kinds.discard("integer")
        alts = [lower(self, schema, ptr) for t, lower in LOWERINGS.items() if t in kinds]
        if not alts:
            return self.never()
        return alts[0] if len(alts) == 1 else self.add(UnionNode(tuple(alts)))
