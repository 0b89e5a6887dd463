"""GrammarCompiler: regex / JSON Schema -> shared, cached, immutable Grammar objects for one tokenizer."""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from .errors import GrammarError
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
            sc = SchemaCompiler(None, self._dfas)
            root = sc.lex_regex_full(pattern)
            return Grammar("regex", pattern, self.index, sc.nodes, root, "compact", root_frame="L")
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
            sc = SchemaCompiler(schema, self._dfas, canonical=whitespace == "compact")
            try:
                root = sc.compile(schema, "#")
            except RecursionError:
                raise GrammarError("schema nests too deeply to compile (limit: Python recursion)") from None
            return Grammar("json_schema", spec, self.index, sc.nodes, root, whitespace,
                           property_order=property_order)
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
