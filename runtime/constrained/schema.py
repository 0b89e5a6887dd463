"""JSON Schema -> grammar nodes. Each sub-schema becomes a small node (lexeme DFA, object, array, union);
`$ref` targets are compiled once and referenced by index, so recursive and large schemas stay bounded.

Exactness rules: a keyword is either enforced exactly or raises UnsupportedSchemaError with its JSON pointer.
Type-specific keywords constrain only values of their type (as the spec says). `allOf` is merged keyword by
keyword (property-wise, with each side's additionalProperties applied to the other's names); `anyOf`/`oneOf`
siblings are distributed into the alternatives; `oneOf` is accepted only when its alternatives are provably
disjoint (by type, by enum/const values, or by a required discriminator property)."""
from __future__ import annotations

import json
import math
from typing import Any, Optional
from urllib.parse import unquote

from .byte_dfa import ByteDFA
from .charfsm import ANY_CHAR, CharFSM, literal_trie, with_length
from .errors import GrammarError, UnsupportedSchemaError
from .formats import FORMATS
from .key_dfa import words_dfa
from .nodes import ArrayNode, LexNode, NeverNode, Node, ObjectNode, UnionNode
from .json_numbers import INTEGER, NUMBER, integer_range, literal_number, multiple_of_fsm, number_bound, number_range
from .regex import RegexUnsupported, regex_to_char_fsm

ANNOTATIONS = {"title", "description", "examples", "default", "$comment", "$schema", "$id", "deprecated",
               "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "$defs",
               "definitions", "$anchor", "$dynamicAnchor", "$vocabulary"}
UNSUPPORTED = {"if", "then", "else", "dependentSchemas", "contains",
               "minContains", "maxContains", "uniqueItems", "propertyNames",
               "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
               "$recursiveAnchor"}
KINDS = ("null", "boolean", "number", "string", "array", "object")
TYPES = {"null", "boolean", "integer", "number", "string", "array", "object"}
# formats defined by JSON Schema; any other "format" value is an annotation that validators ignore
STANDARD_FORMATS = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
                    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
                    "json-pointer", "relative-json-pointer", "regex"}
MAX_LENGTH_STATES = 4000
MAX_NODES = 20_000


def _eq(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, True != 1, object key order ignored."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class SchemaCompiler:
    """One compilation: a root schema document -> (nodes, root index)."""

    def __init__(self, root: Any, dfa_cache: dict, canonical: bool = False):
        self.root = root
        self.canonical = canonical   # generation mode: no needless escapes in strings
        self.nodes: list[Node] = []
        self.refs: dict[str, int] = {}
        self.dfas = dfa_cache
        self.any_id: Optional[int] = None
        self._merge_depth = 0
        if isinstance(root, dict) and "$schema" in root and "json-schema.org/" not in str(root["$schema"]):
            raise UnsupportedSchemaError("$schema", "#", "custom meta-schemas (vocabularies) are not supported")
        self.legacy = isinstance(root, dict) and any(
            d in str(root.get("$schema", "")) for d in ("draft-03", "draft-04", "draft-06", "draft-07"))

    # --- helpers -------------------------------------------------------------------------------------------------
    def add(self, node: Node) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise GrammarError(f"schema too large: more than {MAX_NODES} grammar nodes")
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
                return ByteDFA.from_char_fsm(regex_to_char_fsm(pattern, search), json_string, self.canonical)
            except RegexUnsupported as e:
                raise UnsupportedSchemaError(kw, ptr, str(e)) from None
            except OverflowError as e:
                raise GrammarError(f"{kw} at {ptr}: {e}") from None
        return self.dfa(("re", pattern, json_string, search), build)

    def lex_regex(self, pattern: str) -> int:
        return self.add(LexNode(self.regex_dfa(pattern, False, False, "#", "regex")))

    def lex_regex_full(self, pattern: str) -> int:
        """A user regex (compile_regex): malformed -> GrammarError, unsupported syntax -> GrammarError too."""
        def build():
            try:
                return ByteDFA.from_char_fsm(regex_to_char_fsm(pattern, False), False)
            except OverflowError as e:
                raise GrammarError(f"regex {pattern!r}: {e}") from None
        return self.add(LexNode(self.dfa(("re", pattern, False, False), build)))

    def never(self) -> int:
        return self.add(NeverNode())

    def any(self) -> int:
        if self.any_id is None:
            self.any_id = self.add(UnionNode(()))
            s = self.plain_string(0, None)
            alts = (self.lex_regex("null"), self.lex_regex("true|false"), self.lex_regex(NUMBER), s,
                    self.add(ArrayNode((), self.any_id)), self.add(ObjectNode({}, frozenset(), self.any_id)))
            self.nodes[self.any_id] = UnionNode(alts)
        return self.any_id

    def plain_string(self, min_len: int, max_len: Optional[int]) -> int:
        d = self.dfa(("string",), lambda: ByteDFA.from_char_fsm(
            CharFSM(0, (tuple((a, b, 0) for a, b in ANY_CHAR),), {0: True}), True, self.canonical))
        return self.add(LexNode(d, min_len, max_len))

    # --- $ref ----------------------------------------------------------------------------------------------------
    def resolve(self, ref: str, ptr: str) -> tuple[Any, str]:
        if not ref.startswith("#"):
            raise UnsupportedSchemaError("$ref", ptr, f"only local references are supported, got {ref!r}")
        target = self.root
        path = ref[1:]
        if path and not path.startswith("/"):
            raise UnsupportedSchemaError("$ref", ptr, f"anchor references are not supported: {ref!r}")
        for part in [p for p in path.split("/")[1:]]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            elif isinstance(target, dict) and part in target:
                target = target[part]
            else:
                raise GrammarError(f"$ref {ref!r} at {ptr} does not resolve")
        return target, "#" + path

    def ref_node(self, ref: str, ptr: str) -> int:
        target, tptr = self.resolve(ref, ptr)
        if tptr in self.refs:
            return self.refs[tptr]
        slot = self.add(UnionNode(()))
        self.refs[tptr] = slot
        self.nodes[slot] = UnionNode((self.compile(target, tptr),))
        return slot

    def deref(self, schema: Any, ptr: str, depth: int = 0) -> tuple[Any, str]:
        """Follow a bare {"$ref": ...} chain (for merging and analysis)."""
        while isinstance(schema, dict) and "$ref" in schema and depth < 32:
            rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
            target, tptr = self.resolve(schema["$ref"], ptr)
            if rest and not self.legacy:
                return {"allOf": [target, rest]}, ptr
            schema, ptr, depth = target, tptr, depth + 1
        if depth >= 32:
            raise UnsupportedSchemaError("$ref", ptr, "reference chain too deep")
        return schema, ptr

    # --- main ------------------------------------------------------------------------------------------------------
    def compile(self, schema: Any, ptr: str = "#") -> int:
        if schema is True or schema == {}:
            return self.any()
        if schema is False:
            return self.never()
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {ptr} must be an object or boolean, got {type(schema).__name__}")
        for k in schema:
            if k in UNSUPPORTED:
                raise UnsupportedSchemaError(k, ptr)
        if "$ref" in schema:
            rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
            if not rest or self.legacy:
                return self.ref_node(schema["$ref"], ptr)
            return self.compile({"allOf": [{"$ref": schema["$ref"]}, rest]}, ptr)
        if "allOf" in schema:
            return self.compile(self.merge_all(schema, ptr), ptr)
        for kw in ("anyOf", "oneOf"):
            if kw in schema:
                alts = schema[kw]
                if not isinstance(alts, list) or not alts:
                    raise GrammarError(f"{kw} at {ptr} must be a non-empty array")
                rest = {k: v for k, v in schema.items() if k != kw and k not in ANNOTATIONS}
                subs = []
                for i, a in enumerate(alts):
                    a_ptr = f"{ptr}/{kw}/{i}"
                    if rest:
                        a_res, _ = self.deref(a, a_ptr)
                        subs.append(({"allOf": [rest, a_res]}, a_ptr))
                    else:
                        subs.append((a, a_ptr))
                if kw == "oneOf":
                    self.check_disjoint([s for s, _ in subs], ptr)
                ids = [self.compile(s, p) for s, p in subs]
                return self.add(UnionNode(tuple(ids)))
        return self.compile_flat(schema, ptr)

    def compile_flat(self, schema: dict, ptr: str) -> int:
        """A schema without applicators ($ref/allOf/anyOf/oneOf)."""
        if "not" in schema:
            schema = self.apply_not(schema, ptr)
        if "const" in schema or "enum" in schema:
            return self.compile_enum(schema, ptr)
        types = schema.get("type")
        if types is None:
            kinds = set(KINDS) | {"integer"}
        else:
            tl = types if isinstance(types, list) else [types]
            for t in tl:
                if t not in TYPES:
                    raise GrammarError(f"unknown type {t!r} at {ptr}/type")
            kinds = set(tl)
        if "number" in kinds:
            kinds.discard("integer")
        alts = []
        for t in ("null", "boolean", "integer", "number", "string", "array", "object"):
            if t in kinds:
                alts.append(getattr(self, "t_" + t)(schema, ptr))
        if not alts:
            return self.never()
        return alts[0] if len(alts) == 1 else self.add(UnionNode(tuple(alts)))

    def apply_not(self, schema: dict, ptr: str) -> dict:
        """Rewrite the `not` forms we can express positively: not true/{}/false, not {type}, and not
        {enum/const} of strings, booleans and null (excluded values). Anything else is unsupported."""
        neg, _ = self.deref(schema["not"], f"{ptr}/not")
        out = {k: v for k, v in schema.items() if k != "not"}
        if isinstance(neg, dict):
            neg = {k: v for k, v in neg.items() if k not in ANNOTATIONS}
        if neg is True or neg == {}:
            return {"type": []}
        if neg is False:
            return out
        if set(neg) == {"type"}:
            t = neg["type"] if isinstance(neg["type"], list) else [neg["type"]]
            cur = out.get("type", sorted(TYPES))
            cur = set(cur if isinstance(cur, list) else [cur])
            if "integer" in cur and "number" in cur:
                cur.discard("integer")
            if "integer" in t and "number" in cur and "number" not in t:
                raise UnsupportedSchemaError("not", ptr, "'not integer' over numbers is not supported")
            out["type"] = sorted(x for x in cur if x not in t and not (x == "integer" and "number" in t))
            return out
        if set(neg) <= {"enum", "const", "type"} and ("enum" in neg or "const" in neg):
            vals = list(neg["enum"]) if "enum" in neg else [neg["const"]]
            if "type" in neg:
                nt = neg["type"] if isinstance(neg["type"], list) else [neg["type"]]
                vals = [v for v in vals if _kind(v) in {"number" if x == "integer" else x for x in nt}]
            excl = list(out.get("$exclude", []))
            for v in vals:
                if _kind(v) not in ("string", "null", "boolean"):
                    raise UnsupportedSchemaError("not", ptr, "only strings, booleans and null can be excluded")
                excl.append(v)
            out["$exclude"] = excl
            return out
        raise UnsupportedSchemaError("not", ptr, "only not {type}, not {enum/const} of strings/booleans/null "
                                     "and not true/false are supported")

    # --- scalars ---------------------------------------------------------------------------------------------------
    def t_null(self, s: dict, ptr: str) -> int:
        if any(v is None for v in s.get("$exclude", [])):
            return self.never()
        return self.lex_regex("null")

    def t_boolean(self, s: dict, ptr: str) -> int:
        ex = [v for v in s.get("$exclude", []) if isinstance(v, bool)]
        opts = [w for w, v in (("true", True), ("false", False)) if v not in ex]
        return self.lex_regex("|".join(opts)) if opts else self.never()

    def _bounds(self, s: dict, ptr: str):
        lo = s.get("minimum")
        hi = s.get("maximum")
        lo_x = s.get("exclusiveMinimum")
        hi_x = s.get("exclusiveMaximum")
        lo_excl = hi_excl = False
        if isinstance(lo_x, bool):          # draft-04 form
            lo_excl = lo_x and lo is not None
        elif lo_x is not None:
            if lo is None or lo_x >= lo:
                lo, lo_excl = lo_x, True
        if isinstance(hi_x, bool):
            hi_excl = hi_x and hi is not None
        elif hi_x is not None:
            if hi is None or hi_x <= hi:
                hi, hi_excl = hi_x, True
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise GrammarError(f"{name} at {ptr} must be a number")
        return lo, lo_excl, hi, hi_excl

    def _multiple(self, s: dict, ptr: str) -> Optional[int]:
        k = s.get("multipleOf")
        if k is None:
            return None
        if isinstance(k, bool) or not isinstance(k, (int, float)) or k <= 0:
            raise GrammarError(f"multipleOf at {ptr} must be a positive number")
        if k != int(k) or k > 10_000:
            raise UnsupportedSchemaError("multipleOf", ptr, "only whole multipleOf values up to 10000 are supported")
        return int(k)

    def t_integer(self, s: dict, ptr: str) -> int:
        lo, lo_excl, hi, hi_excl = self._bounds(s, ptr)
        k = self._multiple(s, ptr)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
        if k is not None and k > 1:
            r = integer_range(ilo, ihi) if (lo is not None or hi is not None) else INTEGER
            if r is None:
                return self.never()

            def build():
                fsm = intersect(regex_to_char_fsm(r, False), multiple_of_fsm(k))
                return ByteDFA.from_char_fsm(fsm, False)
            return self.add(LexNode(self.dfa(("mult", r, k), build)))
        if lo is None and hi is None:
            return self.lex_regex(INTEGER)
        r = integer_range(ilo, ihi)
        return self.lex_regex(r) if r else self.never()

    def t_number(self, s: dict, ptr: str) -> int:
        if self._multiple(s, ptr) is not None:      # a whole multipleOf makes every valid number an integer
            return self.t_integer(s, ptr)
        lo, lo_excl, hi, hi_excl = self._bounds(s, ptr)
        if lo is None and hi is None:
            return self.lex_regex(NUMBER)
        try:
            r = number_range(lo, lo_excl, hi, hi_excl)
        except ValueError:
            # fractional bounds: each side is a digit-by-digit comparison; intersect the two automata
            def build():
                sides = [regex_to_char_fsm(number_bound(v, op), False)
                         for v, op in ((lo, "gt" if lo_excl else "ge"), (hi, "lt" if hi_excl else "le"))
                         if v is not None]
                fsm = sides[0] if len(sides) == 1 else intersect(sides[0], sides[1])
                return ByteDFA.from_char_fsm(fsm, False)
            for name, v in (("minimum", lo), ("maximum", hi)):
                if v is not None and not math.isfinite(v):
                    raise GrammarError(f"{name} at {ptr} must be finite")
            d = self.dfa(("numrange", lo, lo_excl, hi, hi_excl), build)
            return self.add(LexNode(d)) if not d.is_empty() else self.never()
        return self.lex_regex(r) if r else self.never()

    def t_string(self, s: dict, ptr: str) -> int:
        min_len = s.get("minLength", 0)
        max_len = s.get("maxLength")
        fsm = None
        if "pattern" in s:
            try:
                fsm = regex_to_char_fsm(s["pattern"], True)
            except RegexUnsupported as e:
                raise UnsupportedSchemaError("pattern", ptr, str(e)) from None
        if "format" in s and s["format"] in STANDARD_FORMATS:   # unknown formats are annotations (spec)
            f = s["format"]
            if f not in FORMATS:
                raise UnsupportedSchemaError("format", ptr, f"format {f!r} is not enforced (supported: "
                                             f"{', '.join(sorted(FORMATS))})")
            ffsm = regex_to_char_fsm(FORMATS[f], False)
            fsm = ffsm if fsm is None else intersect(fsm, ffsm)
        excluded = tuple(sorted({v for v in s.get("$exclude", []) if isinstance(v, str)}))
        if excluded:
            ex_fsm = literal_trie({}, True, excluded)
            if fsm is None:
                d = self.dfa(("notwords", excluded), lambda: words_dfa({}, True, excluded, self.canonical))
                return self.add(LexNode(d, min_len, max_len))
            fsm = intersect(fsm, ex_fsm)
        if fsm is None:
            return self.plain_string(min_len, max_len)
        if min_len == 0 and max_len is not None:
            # exact without a product automaton: with no lower bound, a state is live iff its shortest
            # completion fits in what maxLength leaves (LexNode counts characters, char_dist checks the rest)
            key = ("strfsm", s.get("pattern"), s.get("format"), excluded)
            d = self.dfa(key, lambda: ByteDFA.from_char_fsm(fsm, True, self.canonical))
            return self.add(LexNode(d, 0, max_len))
        if min_len or max_len is not None:
            try:
                fsm = with_length(fsm, min_len, max_len, MAX_LENGTH_STATES)
            except OverflowError:
                raise UnsupportedSchemaError("maxLength" if max_len is not None else "minLength", ptr,
                                             "length bounds together with a pattern/format are too large") from None
        key = ("strfsm", s.get("pattern"), s.get("format"), excluded, min_len, max_len)
        try:
            d = self.dfa(key, lambda: ByteDFA.from_char_fsm(fsm, True, self.canonical))
        except OverflowError as e:
            raise GrammarError(f"string at {ptr}: {e}") from None
        return self.add(LexNode(d))

    # --- enum / const ----------------------------------------------------------------------------------------------
    def compile_enum(self, s: dict, ptr: str) -> int:
        values = list(s["enum"]) if "enum" in s else [s["const"]]
        if "enum" in s and "const" in s:
            values = [v for v in values if _eq(v, s["const"])]
        excluded = s.get("$exclude", [])
        values = [v for v in values if not any(_eq(v, x) for x in excluded)]
        rest = {k: v for k, v in s.items() if k not in ("enum", "const", "$exclude") and k not in ANNOTATIONS}
        if rest:
            import jsonschema
            doc = dict(rest)
            if isinstance(self.root, dict):
                for k in ("$defs", "definitions"):
                    if k in self.root:
                        doc[k] = self.root[k]
            try:
                v = jsonschema.validators.validator_for(doc, default=jsonschema.Draft202012Validator)(doc)
                values = [x for x in values if v.is_valid(x)]
            except jsonschema.exceptions.SchemaError as e:
                raise GrammarError(f"invalid schema at {ptr}: {e.message}") from None
        uniq: list = []
        for v in values:
            if not any(_eq(v, u) for u in uniq):
                uniq.append(v)
        ids = [self.const_node(v) for v in uniq]
        if not ids:
            return self.never()
        # scalars of one lexeme kind could share one DFA; separate nodes keep this simple and exact
        return ids[0] if len(ids) == 1 else self.add(UnionNode(tuple(ids)))

    def const_node(self, v: Any) -> int:
        if v is None:
            return self.lex_regex("null")
        if isinstance(v, bool):
            return self.lex_regex("true" if v else "false")
        if isinstance(v, (int, float)):
            return self.lex_regex(literal_number(v))
        if isinstance(v, str):
            d = self.dfa(("lit", v), lambda: words_dfa({v: True}, None, canonical=self.canonical))
            return self.add(LexNode(d))
        if isinstance(v, list):
            return self.add(ArrayNode(tuple(self.const_node(x) for x in v), None, len(v), len(v)))
        props = {k: self.const_node(x) for k, x in v.items()}
        return self.add(ObjectNode(props, frozenset(props), None))

    # --- containers ------------------------------------------------------------------------------------------------
    def t_array(self, s: dict, ptr: str) -> int:
        prefix = s.get("prefixItems")
        items = s.get("items", True)
        if isinstance(items, list):               # draft <= 2019: items as a tuple
            prefix, items = items, s.get("additionalItems", True)
        elif "additionalItems" in s and prefix is None:
            pass                                  # additionalItems without tuple items is ignored by the spec
        prefix = prefix or []
        pre = tuple(self.compile(p, f"{ptr}/prefixItems/{i}") for i, p in enumerate(prefix))
        it = None if items is False else self.compile(items, f"{ptr}/items")
        return self.add(ArrayNode(pre, it, int(s.get("minItems", 0)),
                                  None if s.get("maxItems") is None else int(s["maxItems"])))

    def t_object(self, s: dict, ptr: str) -> int:
        props_s = s.get("properties", {})
        add_s = s.get("additionalProperties", True)
        additional = None if add_s is False else self.compile(add_s, f"{ptr}/additionalProperties")
        pp = s.get("patternProperties") or {}
        if len(pp) > 4:
            raise UnsupportedSchemaError("patternProperties", ptr, "more than 4 patterns")
        pats, pat_schemas = [], []
        for p, sub in pp.items():
            try:
                pats.append(regex_to_char_fsm(p, True))
            except RegexUnsupported as e:
                raise UnsupportedSchemaError("patternProperties", ptr, str(e)) from None
            pat_schemas.append(sub)

        def combined(name_schema, matched, where):
            parts = ([name_schema] if name_schema is not None else []) + [pat_schemas[i] for i in matched]
            if len(parts) == 1:
                return self.compile(parts[0], where)
            return self.compile({"allOf": parts}, where)
        props = {}
        for name, sub in props_s.items():
            matched = [i for i, f in enumerate(pats) if f.matches(name)]
            props[name] = combined(sub, matched, f"{ptr}/properties/{name}")
        pattern_nodes = {}
        for mask in range(1, 1 << len(pats)):
            subset = frozenset(i for i in range(len(pats)) if mask >> i & 1)
            pattern_nodes[subset] = combined(None, sorted(subset), f"{ptr}/patternProperties")
        required = frozenset(s.get("required", []))
        deps = {k: frozenset(v) for k, v in s.get("dependentRequired", {}).items()}
        for k, v in (s.get("dependencies") or {}).items():       # draft <= 7
            if isinstance(v, list):
                deps[k] = deps.get(k, frozenset()) | frozenset(v)
            else:
                raise UnsupportedSchemaError("dependencies", ptr, "schema dependencies are not supported")
        named_needed = set(required) | set(deps) | {n for v in deps.values() for n in v}
        for r in named_needed:
            if r not in props:
                matched = frozenset(i for i, f in enumerate(pats) if f.matches(r))
                v = pattern_nodes[matched] if matched else additional
                props[r] = v if v is not None else self.never()
        return self.add(ObjectNode(props, required, additional, int(s.get("minProperties", 0)),
                                   None if s.get("maxProperties") is None else int(s["maxProperties"]),
                                   tuple(pats), pattern_nodes, deps))

    # --- allOf -----------------------------------------------------------------------------------------------------
    def merge_all(self, schema: dict, ptr: str) -> dict:
        parts = []
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        subs = schema["allOf"]
        if not isinstance(subs, list) or not subs:
            raise GrammarError(f"allOf at {ptr} must be a non-empty array")
        for i, sub in enumerate(subs):
            d, _ = self.deref(sub, f"{ptr}/allOf/{i}")
            if isinstance(d, dict) and "allOf" in d:
                d = self.merge_all(d, f"{ptr}/allOf/{i}")
            parts.append(d)
        if rest:
            parts.append(rest)
        out: Any = True
        for p in parts:
            out = self.merge(out, p, ptr)
        if out is True:
            return {}
        if out is False:
            return {"type": []}
        return out

    def merge(self, a: Any, b: Any, ptr: str) -> Any:
        self._merge_depth += 1
        try:
            if self._merge_depth > 64:
                raise UnsupportedSchemaError("allOf", ptr, "recursive schemas cannot be merged")
            return self._merge(a, b, ptr)
        finally:
            self._merge_depth -= 1

    def _merge(self, a: Any, b: Any, ptr: str) -> Any:
        if a is True or a == {}:
            return b
        if b is True or b == {}:
            return a
        if a is False or b is False:
            return False
        a, _ = self.deref(a, ptr)
        b, _ = self.deref(b, ptr)
        for d in (a, b):
            if "allOf" in d:
                return self.merge(self.merge_all(d, ptr), b if d is a else a, ptr)
        # distribute unions: (A and (B1 or B2)) = (A and B1) or (A and B2)
        for kw in ("anyOf", "oneOf"):
            for x, y in ((a, b), (b, a)):
                if kw in x:
                    if kw == "oneOf":
                        self.check_disjoint(x["oneOf"], ptr)
                    xr = {k: v for k, v in x.items() if k != kw}
                    base = self.merge(xr, y, ptr) if xr else y
                    return {"anyOf": [self.merge(base, alt, ptr) for alt in x[kw]]}
        out = {k: v for k, v in a.items() if k not in ANNOTATIONS}
        for k, v in b.items():
            if k in ANNOTATIONS:
                continue
            if k not in out:
                out[k] = v
                continue
            u = out[k]
            if k == "type":
                ta = set(u if isinstance(u, list) else [u])
                tb = set(v if isinstance(v, list) else [v])
                t = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or
                                 ("number" in ta and "integer" in tb) else set())
                out[k] = sorted(t)
            elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties") and \
                    not isinstance(u, bool) and not isinstance(v, bool):
                out[k] = max(u, v)
            elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties") and \
                    not isinstance(u, bool) and not isinstance(v, bool):
                out[k] = min(u, v)
            elif k == "required":
                out[k] = list(dict.fromkeys(list(u) + list(v)))
            elif k in ("enum", "const"):
                ua = u if k == "enum" else [u]
                va = v if k == "enum" else [v]
                out[k] = [x for x in ua if any(_eq(x, y) for y in va)] if k == "enum" else u
                if k == "const" and not _eq(u, v):
                    out = {"type": []}
                    return out
            elif _eq(u, v):
                continue
            elif k in ("properties", "additionalProperties", "items", "prefixItems"):
                continue   # handled below
            else:
                raise UnsupportedSchemaError("allOf", ptr, f"cannot merge differing {k!r} values")
        # objects: each side's additionalProperties applies to the other side's extra names
        if ("patternProperties" in a or "patternProperties" in b) and any(
                k in x for x in (a, b) for k in ("properties", "additionalProperties")):
            raise UnsupportedSchemaError("allOf", ptr, "cannot merge patternProperties with properties")
        if any(k in a or k in b for k in ("properties", "additionalProperties")):
            pa, pb = a.get("properties", {}), b.get("properties", {})
            aa, ab = a.get("additionalProperties", True), b.get("additionalProperties", True)
            props = {}
            for name in list(pa) + [n for n in pb if n not in pa]:
                props[name] = self.merge(pa.get(name, aa), pb.get(name, ab), ptr)
            out["properties"] = props
            out["additionalProperties"] = self.merge(aa, ab, ptr)
        if any(k in a or k in b for k in ("items", "prefixItems")):
            def split(d):
                if isinstance(d.get("items"), list):
                    return list(d["items"]), d.get("additionalItems", True)
                return list(d.get("prefixItems", [])), d.get("items", True)
            xa, ia = split(a)
            xb, ib = split(b)
            n = max(len(xa), len(xb))
            out["prefixItems"] = [self.merge(xa[i] if i < len(xa) else ia, xb[i] if i < len(xb) else ib, ptr)
                                  for i in range(n)]
            out["items"] = self.merge(ia, ib, ptr)
            out.pop("additionalItems", None)
        if "enum" in out and "const" in out:
            c = out.pop("const")
            out["enum"] = [x for x in out["enum"] if _eq(x, c)]
        return out

    # --- oneOf -----------------------------------------------------------------------------------------------------
    def kinds(self, s: Any, ptr: str, depth: int = 0) -> set[str]:
        if depth > 16 or s is True:
            return set(KINDS)
        if s is False:
            return set()
        s, ptr = self.deref(s, ptr)
        if not isinstance(s, dict):
            return set(KINDS)
        out = set(KINDS)
        if "type" in s:
            t = s["type"] if isinstance(s["type"], list) else [s["type"]]
            out &= {"number" if x == "integer" else x for x in t}
        if "const" in s:
            out &= {_kind(s["const"])}
        if "enum" in s and isinstance(s["enum"], list):
            out &= {_kind(v) for v in s["enum"]}
        for kw in ("anyOf", "oneOf"):
            if kw in s:
                u = set()
                for a in s[kw]:
                    u |= self.kinds(a, ptr, depth + 1)
                out &= u
        for a in s.get("allOf", []):
            out &= self.kinds(a, ptr, depth + 1)
        return out

    def values(self, s: Any) -> Optional[list]:
        if not isinstance(s, dict):
            return None
        s, _ = self.deref(s, "#")
        if not isinstance(s, dict):
            return None
        if "const" in s:
            return [s["const"]]
        if "enum" in s:
            return list(s["enum"])
        return None

    def disjoint(self, a: Any, b: Any, ptr: str) -> bool:
        """Whether no value can match both schemas (sound, not complete)."""
        common = self.kinds(a, ptr) & self.kinds(b, ptr)
        if not common:
            return True
        va, vb = self.values(a), self.values(b)
        if va is not None and vb is not None and not any(_eq(x, y) for x in va for y in vb):
            return True
        a, _ = self.deref(a, ptr)
        b, _ = self.deref(b, ptr)
        if common != {"object"} or not isinstance(a, dict) or not isinstance(b, dict):
            return False
        ra, rb = set(a.get("required", [])), set(b.get("required", []))
        pa, pb = a.get("properties", {}), b.get("properties", {})
        # discriminator: a property required by both whose allowed values do not overlap
        for name in ra & rb:
            xa, xb = self.values(pa.get(name)), self.values(pb.get(name))
            if xa is not None and xb is not None and not any(_eq(x, y) for x in xa for y in xb):
                return True
        # one side forbids other names and the other side requires a name outside its properties
        for x, rx_other in ((a, rb), (b, ra)):
            if x.get("additionalProperties", True) is False and "patternProperties" not in x:
                if any(r not in x.get("properties", {}) for r in rx_other):
                    return True
        return False

    def check_disjoint(self, alts: list, ptr: str) -> None:
        for i in range(len(alts)):
            for j in range(i + 1, len(alts)):
                if not self.disjoint(alts[i], alts[j], ptr):
                    raise UnsupportedSchemaError("oneOf", ptr, f"alternatives {i} and {j} may both match; "
                                                 "oneOf is enforced only for provably disjoint alternatives "
                                                 "(use anyOf if overlap is fine)")


def intersect(a: CharFSM, b: CharFSM, limit: int = 20_000) -> CharFSM:
    """Product automaton accepting words of both."""
    index = {(a.initial, b.initial): 0}
    order = [(a.initial, b.initial)]
    trans = []
    i = 0
    while i < len(order):
        x, y = order[i]
        out = []
        ra, rb = a.trans[x], b.trans[y]
        p = q = 0
        while p < len(ra) and q < len(rb):
            lo = max(ra[p][0], rb[q][0])
            hi = min(ra[p][1], rb[q][1])
            if lo <= hi:
                key = (ra[p][2], rb[q][2])
                if key not in index:
                    index[key] = len(order)
                    order.append(key)
                    if len(order) > limit:
                        raise GrammarError("pattern intersection too large")
                out.append((lo, hi, index[key]))
            if ra[p][1] < rb[q][1]:
                p += 1
            else:
                q += 1
        trans.append(tuple(out))
        i += 1
    finals = {k: True for (x, y), k in index.items() if x in a.finals and y in b.finals}
    return CharFSM(0, tuple(trans), finals)
