"""GrammarCompiler: regex / JSON Schema -> shared, cached, immutable Grammar objects for one tokenizer."""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from .automata.dfa_lowering import lower_char_fsm
from .automata.regex import regex_to_char_fsm
from .errors import GrammarError
from .ir.grammar_ir import JSON_WS, GrammarIR
from .ir.nodes import LexNode
from .parser.grammar import Grammar
from .schema.compiler import SchemaCompiler
from .vocab.token_index import TokenIndex

WHITESPACE_MODES = ("any", "compact")
PROPERTY_ORDERS = ("any", "schema")


class GrammarCompiler:
    """Compiles grammars for one tokenizer. Thread-safe; results are cached by (kind, spec, tokenizer.name)."""

    def __init__(self, tokenizer, cache_size: int = 256):
        self.tokenizer = tokenizer
        self.index = TokenIndex(tokenizer)
        self._cache: OrderedDict[tuple, Grammar] = OrderedDict()
        self._dfas: dict = {}          # lexeme DFAs shared between grammars (e.g. the plain JSON string)
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Lock] = {}   # key -> lock held while one thread builds it

    def _cached(self, key: tuple, build) -> Grammar:
        """The cached grammar for key, built once: concurrent callers of a key being built wait for it."""
        with self._lock:
            g = self._cache.get(key)
            if g is not None:
                self._cache.move_to_end(key)
                return g
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                g = self._cache.get(key)
            if g is None:
                try:
                    g = build()
                finally:
                    with self._lock:
                        self._building.pop(key, None)
                with self._lock:
                    self._cache[key] = g
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        return g

    def compile_regex(self, pattern: str) -> Grammar:
        """Grammar whose outputs match `pattern` entirely (Python regex syntax, ^/$ optional)."""
        if not isinstance(pattern, str):
            raise GrammarError(f"regex must be a str, got {type(pattern).__name__}")

        def build() -> Grammar:
            dfa = self._dfas.get(("regex", pattern))
            if dfa is None:
                try:
                    dfa = self._dfas[("regex", pattern)] = lower_char_fsm(regex_to_char_fsm(pattern), False)
                except OverflowError as e:
                    raise GrammarError(f"regex {pattern!r}: {e}") from None
            # a regex is one lexeme: the IR's only node
            return Grammar("regex", pattern, self.index, GrammarIR((LexNode(dfa, source=f"/{pattern}/"),), 0))
        return self._cached(("regex", pattern, self.tokenizer.name), build)

    def compile_json_schema(self, schema: Any, whitespace: str = "any", property_order: str = "any") -> Grammar:
        """Grammar for JSON documents valid under `schema` (dict, JSON text, or a pydantic model class).
        `whitespace`: "any" accepts every JSON text of a valid value (any whitespace, any escapes); "compact"
        is the generation mode: no whitespace and no needless escapes, so more text is forced.
        `property_order`: "any" accepts an object's properties in any order; "schema" (generation) writes named
        properties in the order the schema lists them, required ones never skipped, other names after them."""
        if whitespace not in WHITESPACE_MODES:
            raise ValueError(f"whitespace must be one of {WHITESPACE_MODES}, got {whitespace!r}")
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}, got {property_order!r}")
        schema = _load_schema(schema)
        # the cache key: canonical, except that with ordered properties the schema's key order matters
        spec = json.dumps(schema, sort_keys=property_order != "schema")

        def build() -> Grammar:
            _check_schema(schema)
            canonical = whitespace == "compact"
            sc = SchemaCompiler(schema, self._dfas, canonical=canonical)
            try:
                root = sc.compile(schema, "#")
            except RecursionError:
                raise GrammarError("schema nests too deeply to compile (limit: Python recursion)") from None
            ir = GrammarIR(tuple(sc.nodes), root, whitespace=JSON_WS if whitespace == "any" else frozenset(),
                           canonical=canonical, ordered=property_order == "schema")
            return Grammar("json_schema", spec, self.index, ir)
        return self._cached(("json_schema", spec, whitespace, property_order, self.tokenizer.name), build)


def _load_schema(schema: Any) -> Any:
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"json_schema is not valid JSON: {e}") from None
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    raise GrammarError(f"json_schema must be a dict, a JSON string or a pydantic model class, got "
                       f"{type(schema).__name__}")


def _check_schema(schema: Any) -> None:
    import jsonschema
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator) \
            if isinstance(schema, dict) else jsonschema.Draft202012Validator
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        path = "#" + "".join(f"/{p}" for p in e.path)
        raise GrammarError(f"invalid JSON Schema at {path}: {e.message}") from None
