"""SchemaDocument: the root schema that `$ref`s point into, and the draft rules for following them."""
from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from ..errors import GrammarError, UnsupportedSchemaError
from .keywords import constraints

MAX_REF_CHAIN = 32
# the draft each keyword we enforce by rewriting appeared in (before it, it is an unknown word: no effect)
_SINCE = {"contains": 6, "propertyNames": 6, "if": 7, "then": 7, "else": 7, "dependentSchemas": 2019,
          "dependentRequired": 2019, "unevaluatedProperties": 2019, "unevaluatedItems": 2019,
          "minContains": 2019, "maxContains": 2019}


class SchemaDocument:
    """Immutable view of one root schema. Only local JSON-pointer references (`#`, `#/a/b`) resolve."""

    def __init__(self, root: Any):
        if isinstance(root, dict) and "$schema" in root and "json-schema.org/" not in str(root["$schema"]):
            raise UnsupportedSchemaError("$schema", "#", "custom meta-schemas (vocabularies) are not supported")
        self.root = root
        # draft <= 7: a `$ref` replaces its whole schema object (siblings are ignored)
        self.legacy = isinstance(root, dict) and any(
            d in str(root.get("$schema", "")) for d in ("draft-03", "draft-04", "draft-06", "draft-07"))
        declared = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        self.draft = next((n for d, n in (("draft-03", 3), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7),
                                          ("2019-09", 2019)) if d in declared), 2020)

    def knows(self, keyword: str) -> bool:
        """Whether `keyword` is a keyword of this document's draft (an unknown one is an annotation: ignored)."""
        return self.draft >= _SINCE.get(keyword, 0)

    def resolve(self, ref: str, ptr: str) -> tuple[Any, str]:
        """The schema `ref` (found at `ptr`) points to, and its own pointer."""
        if not ref.startswith("#"):
            raise UnsupportedSchemaError("$ref", ptr, f"only local references are supported, got {ref!r}")
        target = self.root
        path = ref[1:]
        if path and not path.startswith("/"):
            raise UnsupportedSchemaError("$ref", ptr, f"anchor references are not supported: {ref!r}")
        for part in path.split("/")[1:]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            elif isinstance(target, dict) and part in target:
                target = target[part]
            else:
                raise GrammarError(f"$ref {ref!r} at {ptr} does not resolve")
        return target, "#" + path

    def ref_siblings(self, schema: dict) -> dict:
        """The constraints beside a `$ref` that apply together with its target (none before draft 2019-09)."""
        return {} if self.legacy else constraints(schema, "$ref")

    def deref(self, schema: Any, ptr: str) -> tuple[Any, str]:
        """Follow a bare {"$ref": ...} chain (for merging and analysis); a `$ref` with sibling constraints
        becomes {"allOf": [target, siblings]}."""
        depth = 0
        while isinstance(schema, dict) and "$ref" in schema and depth < MAX_REF_CHAIN:
            rest = self.ref_siblings(schema)
            target, tptr = self.resolve(schema["$ref"], ptr)
            if rest:
                return {"allOf": [target, rest]}, ptr
            schema, ptr, depth = target, tptr, depth + 1
        if depth >= MAX_REF_CHAIN:
            raise UnsupportedSchemaError("$ref", ptr, "reference chain too deep")
        return schema, ptr
