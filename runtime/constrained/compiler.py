"""GrammarCompiler: regex / JSON Schema / Lark / GBNF / structural tags -> one grammar IR each -> shared, cached,
immutable Grammar objects for one tokenizer."""
from __future__ import annotations

import json
import threading
from typing import Any

from sglite.protocol import RequestError, load_json_schema

from .automata import rx
from .automata.dfa_lowering import lower_char_fsm
from .automata.regex import regex_to_char_fsm
from .automata.regex_counter import counted_regex
from .automata.span_dfa import span_dfa
from ..defaults import (GRAMMAR_CACHE_BYTES, JSON_WHITESPACE_MODES, MATCH_PROPERTY_ORDER, MATCH_WHITESPACE,
                        PROPERTY_ORDERS)
from .budget import CompileBudget, within
from .cfg import GRAMMAR_SYNTAXES, gbnf_to_ir, lark_to_ir, lower_rules
from .cfg.structural_tag import parse_structural_tag, structural_tag_to_ir
from .errors import GrammarError
from .cache import CacheBudget, LruCache
from .footprint import Footprint, dfa_bytes
from .ir.generation_caps import GenerationCaps, apply_generation_caps
from .ir.grammar_ir import JSON_WS, GrammarIR
from .ir.nodes import LexNode
from .parser.grammar import Grammar
from .schema.metaschema import check_schema
from .schema.schema_compiler import SchemaCompiler
from .schema.size import check_schema_size
from .vocab.token_index import TokenIndex

# generation-mode whitespace as lexemes (see GrammarIR): "standard" reads one space after every ':' and ',';
# "flexible" allows, wherever JSON allows whitespace inside the value, one run of it: a space, or one or two
# newlines and an indent of at most 20 spaces/tabs (llama.cpp's JSON grammars bound whitespace alike)
_SEPARATOR = rx.Lit(" ")
_WS_RUN = rx.alt(" ", rx.seq("\n", rx.opt("\n"), rx.rep(rx.chars(" \t"), 0, 20)))
CLASSIFY_STATES = 512    # lexeme states a grammar from rules classifies at compile time (SQL's first-pass mask
                          # median 55 -> 40 us for ~6 ms more compile time)


class GrammarCompiler:
    """Compiles grammars for one tokenizer. Thread-safe; results are cached by (kind, spec, tokenizer.name),
    least recently used out first, past `cache_size` grammars or when the compiler's cache budget is full."""

    def __init__(self, tokenizer, cache_size: int = 256, budget: CompileBudget | None = CompileBudget(),
                 cache_bytes: int = GRAMMAR_CACHE_BYTES):
        """`budget`: what one compile may spend (budget.py); past it a CompileBudgetExceeded (a GrammarError)
        names the construct. None: unbounded. `cache_bytes`: the budget of every cache below this compiler
        (cache.py): the grammars (by their tables, footprint.py), the lexeme DFAs they share, the token index's
        classifications and each grammar's mask caches as they grow with use, in one least-recently-used order.
        Also applied on every compile call, so a change of `cache_bytes` takes effect at the next one. A
        grammar larger than the bound by itself is returned, not kept."""
        self.tokenizer = tokenizer
        self.budget = budget
        self.caches = CacheBudget(cache_bytes)
        self.index = TokenIndex(tokenizer, self.caches)
        self._cache = LruCache(self.caches, "grammars", max_entries=cache_size,
                               size=lambda g: Footprint(g, (self.index,)).tables)
        # lexeme DFAs shared between grammars (the plain JSON string), at most an eighth of the budget
        self._dfas = LruCache(self.caches, "lexeme DFAs", limit=cache_bytes // 8, size=dfa_bytes)
        self._separator_ok: bool | None = None   # see _spells_separator
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Lock] = {}   # key -> lock held while one thread builds it

    @property
    def cache_bytes(self) -> int:
        return self.caches.limit

    @cache_bytes.setter
    def cache_bytes(self, n: int) -> None:
        self.caches.limit = n

    def cached_bytes(self) -> int:
        """What every cache below this compiler holds now (cache.py)."""
        return self.caches.nbytes()

    def _cached(self, key: tuple, build) -> Grammar:
        """The cached grammar for key, built once: concurrent callers of a key being built wait for it."""
        g = self._cache.get(key)
        if g is not None:
            self.caches.trim()
            return g
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:
            g = self._cache.get(key)
            if g is None:
                try:
                    with within(self.budget):
                        g = build()
                finally:
                    with self._lock:
                        self._building.pop(key, None)
                g = self._cache.put(key, g)
        return g

    def compile_regex(self, pattern: str) -> Grammar:
        """Grammar whose outputs match `pattern` entirely (Python regex syntax, ^/$ optional)."""
        if not isinstance(pattern, str):
            raise GrammarError(f"regex must be a str, got {type(pattern).__name__}")

        def build() -> Grammar:
            # a regex is one lexeme: the IR's only node; its largest counted repetition of a character class,
            # if large, is counted by the parser rather than unrolled (automata/regex_counter.py)
            counted = counted_regex(pattern)
            if counted is None:
                node = LexNode(self._regex_dfa(pattern), source=f"/{pattern}/")
            else:
                try:
                    dfa = lower_char_fsm(counted.fsm, False)
                except OverflowError as e:
                    raise GrammarError(f"regex {pattern!r}: {e}") from None
                node = LexNode(dfa, counted.min_count, counted.max_count, source=f"/{pattern}/")
            return Grammar("regex", pattern, self.index, GrammarIR((node,), 0))
        return self._cached(("regex", pattern, self.tokenizer.name), build)

    def compile_span(self, text: str) -> Grammar:
        """Grammar whose outputs are the non-empty verbatim spans of `text` (free text, any tokenisation; its
        suffix automaton, automata/span_dfa.py). Raises GrammarError for an empty text or one past
        span_dfa.MAX_SPAN_CHARS characters."""
        if not isinstance(text, str):
            raise GrammarError(f"span_of must be a str, got {type(text).__name__}")

        def build() -> Grammar:
            try:
                dfa = span_dfa(text, canonical=True, json_string=False)
            except ValueError as e:
                raise GrammarError(f"span_of: {e}; pass the part of the document the value is in") from None
            node = LexNode(dfa, source=f"span of {len(text)} chars")
            return Grammar("span_of", text, self.index, GrammarIR((node,), 0))
        return self._cached(("span_of", text, self.tokenizer.name), build)

    def compile_json_schema(self, schema: Any, whitespace: str = MATCH_WHITESPACE,
                            property_order: str = MATCH_PROPERTY_ORDER,
                            close_objects: bool = False, unique_keys: bool = False,
                            caps: GenerationCaps | None = None) -> Grammar:
        """Grammar for JSON documents valid under `schema` (dict, JSON text, or a pydantic model class).
        `whitespace`: "any" accepts every JSON text of a valid value (any whitespace, any escapes): the exact
        matcher. The others are generation modes, with no needless escapes (so more text is forced):
        "compact" writes no whitespace at all, "standard" one space after each ':' and ',' (`{"a": 1, "b": 2}`,
        Python's json.dumps style), "flexible" allows one bounded whitespace run wherever JSON allows whitespace
        inside the value (a space, or a newline and an indent).
        `property_order`: "any" accepts an object's properties in any order; "schema" (generation) writes named
        properties in the order the schema lists them, required ones never skipped, other names after them.
        `close_objects` (generation): an object schema that declares `properties` or `patternProperties` but
        says nothing of `additionalProperties` gets no other names (as OpenAI's structured outputs and
        xgrammar's strict mode do); `additionalProperties: true` or a schema keeps them.
        `unique_keys` (generation): no property name twice in one object, names outside `properties` included
        (compared as spelled, so exact with the canonical strings of the generation whitespace modes).
        `caps` (generation): bounds that end runaway strings, arrays and recursion where the schema sets none
        (`GenerationCaps()` holds the defaults; see ir/generation_caps.py); None: no caps."""
        if whitespace not in JSON_WHITESPACE_MODES:
            raise ValueError(f"whitespace must be one of {JSON_WHITESPACE_MODES}, got {whitespace!r}")
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}, got {property_order!r}")
        if not isinstance(unique_keys, bool):
            raise ValueError(f"unique_keys must be a bool, got {unique_keys!r}")
        if caps is not None and not isinstance(caps, GenerationCaps):
            raise ValueError(f"caps must be a GenerationCaps or None, got {type(caps).__name__}")
        schema = _load_schema(schema)
        # the cache key: canonical, except that with ordered properties the schema's key order matters
        spec = json.dumps(schema, sort_keys=property_order != "schema")

        def build() -> Grammar:
            ir = self._schema_ir(schema, whitespace, property_order, close_objects, unique_keys, caps)
            return Grammar("json_schema", spec, self.index, ir)
        return self._cached(("json_schema", spec, whitespace, property_order, close_objects, unique_keys, caps,
                             self.tokenizer.name), build)

    def _schema_ir(self, schema: Any, whitespace: str, property_order: str, close_objects: bool = False,
                   unique_keys: bool = False, caps: GenerationCaps | None = None) -> GrammarIR:
        """The grammar IR of a loaded schema under compile_json_schema's options."""
        if self.budget is not None:
            check_schema_size(schema, self.budget.schema_values)
        check_schema(schema)
        canonical = whitespace != "any"
        sc = SchemaCompiler(schema, self._dfas, canonical=canonical, close_objects=close_objects)
        try:
            root = sc.compile(schema, "#")
        except RecursionError:
            raise GrammarError("schema nests too deeply to compile (limit: Python recursion)") from None
        nodes = list(sc.nodes)
        separator = ws_run = None
        if whitespace == "standard" and self._spells_separator():
            # (a vocabulary with no token starting with a space could never write it: compact instead)
            separator = len(nodes)
            nodes.append(LexNode(self._tree_dfa(_SEPARATOR), source='" "'))
        elif whitespace == "flexible":
            ws_run = len(nodes)
            nodes.append(LexNode(self._tree_dfa(_WS_RUN), source=f"/{rx.show(_WS_RUN)}/"))
        ir = GrammarIR(tuple(nodes), root, whitespace=JSON_WS if whitespace == "any" else frozenset(),
                       canonical=canonical, ordered=property_order == "schema", separator=separator,
                       ws_run=ws_run, unique_keys=unique_keys)
        return apply_generation_caps(ir, caps) if caps is not None else ir

    def _spells_separator(self) -> bool:
        """Whether some token of the vocabulary starts with the "standard" separator."""
        if self._separator_ok is None:
            sep = _SEPARATOR.text.encode()
            self._separator_ok = any(b.startswith(sep) for b in self.index.token_bytes if b)
        return self._separator_ok

    def _tree_dfa(self, tree: rx.Rx):
        """The byte DFA of a regex tree, shared between grammars."""
        dfa = self._dfas.get(("rx", tree))
        if dfa is None:
            dfa = self._dfas.put(("rx", tree), lower_char_fsm(rx.to_char_fsm(tree), False))
        return dfa

    def _regex_dfa(self, pattern: str):
        """The byte DFA of a full-match regex, shared between grammars."""
        dfa = self._dfas.get(("regex", pattern))
        if dfa is None:
            try:
                dfa = self._dfas.put(("regex", pattern), lower_char_fsm(regex_to_char_fsm(pattern), False))
            except OverflowError as e:
                raise GrammarError(f"regex {pattern!r}: {e}") from None
        return dfa

    def compile_grammar(self, text: str, syntax: str = "lark") -> Grammar:
        """Grammar for the strings of a context-free grammar: `syntax` "lark" (Lark's EBNF, start rule `start`,
        `%ignore` honoured) or "gbnf" (llama.cpp's format, start rule `root`). The same `matcher()` interface
        as the other grammars. Raises GrammarError naming the rule or terminal it cannot handle."""
        if syntax not in GRAMMAR_SYNTAXES:
            raise ValueError(f"syntax must be one of {GRAMMAR_SYNTAXES}, got {syntax!r}")
        if not isinstance(text, str) or not text.strip():
            raise GrammarError(f"a {syntax} grammar must be a non-empty str, got {text!r:.80}")

        def build() -> Grammar:
            rules = lark_to_ir(text) if syntax == "lark" else gbnf_to_ir(text)
            return Grammar(syntax, text, self.index, lower_rules(rules), classify_states=CLASSIFY_STATES)
        return self._cached(("grammar", syntax, text, self.tokenizer.name), build)

    def compile_structural_tag(self, spec: Any, whitespace: str = MATCH_WHITESPACE,
                               property_order: str = MATCH_PROPERTY_ORDER) -> Grammar:
        """Grammar for free text in which each trigger starts one of the structures: its `begin`, a JSON value
        under its `schema` (compiled as compile_json_schema does, with these options), its `end`; then free text
        again. `spec`: SGLang's {"structures": [{"begin", "schema", "end"}, ...], "triggers": [...]} as a dict
        or JSON text. Rules (cfg/structural_tag.py) lowered to one grammar IR, each structure's JSON value its
        schema's IR embedded. Raises GrammarError (or UnsupportedSchemaError) naming the structure at fault."""
        structures, triggers, key = parse_structural_tag(spec)

        if whitespace not in JSON_WHITESPACE_MODES:
            raise ValueError(f"whitespace must be one of {JSON_WHITESPACE_MODES}, got {whitespace!r}")
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}, got {property_order!r}")

        def build() -> Grammar:
            bodies = []
            for i, s in enumerate(structures):
                try:
                    bodies.append(self._schema_ir(_load_schema(s.schema), whitespace, property_order))
                except GrammarError as e:
                    raise GrammarError(f"structural_tag structures[{i}].schema: {e}") from None
            rules = structural_tag_to_ir(structures, triggers, bodies)
            return Grammar("structural_tag", key, self.index, lower_rules(rules), classify_states=CLASSIFY_STATES)
        return self._cached(("structural_tag", key, whitespace, property_order, self.tokenizer.name), build)


def _load_schema(schema: Any) -> Any:
    """A schema as `protocol.load_json_schema` reads it (so a pydantic model compiles to one grammar on every
    path, its objects closed), or a boolean schema as given."""
    if isinstance(schema, bool):
        return schema
    try:
        return load_json_schema(schema)
    except RequestError as e:
        raise GrammarError(e.message) from None
