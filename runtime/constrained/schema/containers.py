"""Lowering of `type: array` and `type: object` to ArrayNode / ObjectNode; their sub-schemas are compiled
through the SchemaCompiler, so `$ref` cycles stay cycles of node indices."""
from __future__ import annotations

from ..automata.regex import RegexUnsupported, regex_to_char_fsm
from ..errors import UnsupportedSchemaError
from ..ir.nodes import ArrayNode, ObjectNode
from .array_keywords import contains_rewrite, counted_array, unique_arrays
from .lowerer import Lowerer
from .names import property_names

MAX_PATTERN_PROPERTIES = 4    # a value node is built for every subset of patterns a name can match


def lower_array(sc: Lowerer, s: dict, ptr: str) -> int:
    s = {k: v for k, v in s.items() if sc.doc.knows(k)}
    if s.get("uniqueItems") is True:
        return sc.compile(unique_arrays(sc, s, ptr), ptr)
    if "contains" in s:
        r = contains_rewrite(sc, s, ptr)
        return sc.compile(r, ptr) if r is not None else counted_array(sc, s, ptr)
    prefix = s.get("prefixItems")
    items = s.get("items", True)
    if isinstance(items, list):               # draft <= 2019: items as a tuple, then additionalItems
        prefix, items = items, s.get("additionalItems", True)
    # additionalItems without tuple-form items is ignored (spec)
    prefix = prefix or []
    pre = tuple(sc.compile(p, f"{ptr}/prefixItems/{i}") for i, p in enumerate(prefix))
    it = None if items is False else sc.compile(items, f"{ptr}/items")
    return sc.add(ArrayNode(pre, it, int(s.get("minItems", 0)),
                            None if s.get("maxItems") is None else int(s["maxItems"])))


def lower_object(sc: Lowerer, s: dict, ptr: str) -> int:
    """A value under a name must match its `properties` schema and every pattern the name matches; a name
    that is required (directly or by dependentRequired) but not listed gets its pattern/additional node."""
    s = {k: v for k, v in s.items() if sc.doc.knows(k)}
    props_s = s.get("properties", {})
    declares_names = "properties" in s or "patternProperties" in s
    add_s = s.get("additionalProperties", not (sc.close_objects and declares_names))
    additional = None if add_s is False else sc.compile(add_s, f"{ptr}/additionalProperties")
    pp = s.get("patternProperties") or {}
    if len(pp) > MAX_PATTERN_PROPERTIES:
        raise UnsupportedSchemaError("patternProperties", ptr, f"more than {MAX_PATTERN_PROPERTIES} patterns")
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
            return sc.compile(parts[0], where)
        return sc.compile({"allOf": parts}, where)

    # propertyNames: None (any name), False (none), a list (only these), or a CharFSM the names must match
    names = property_names(sc, s.get("propertyNames", True), f"{ptr}/propertyNames")
    if isinstance(names, list):
        extra = {n: True if any(f.matches(n) for f in pats) else add_s for n in names if n not in props_s}
        props_s = {n: v for n, v in {**props_s, **extra}.items() if n in names}
    props = {}
    for name, sub in props_s.items():
        matched = [i for i, f in enumerate(pats) if f.matches(name)]
        if names is False or (names is not None and not isinstance(names, list) and not names.matches(name)):
            props[name] = sc.never()
        else:
            props[name] = combined(sub, matched, f"{ptr}/properties/{name}")
    pattern_nodes = {}
    for mask in range(1, 1 << len(pats)):
        subset = frozenset(i for i in range(len(pats)) if mask >> i & 1)
        pattern_nodes[subset] = combined(None, sorted(subset), f"{ptr}/patternProperties")
    pattern_text = tuple(pp)
    if isinstance(names, list) or names is False:      # no name outside `props`
        never = sc.never()
        pattern_nodes = {sub: never for sub in pattern_nodes}
        additional = None
    elif names is not None:
        # the names filter as one more pattern: every name must match it; one matching no other pattern is
        # "additional"
        f_idx, never = len(pats), sc.never()
        pats.append(names)
        pattern_text += ("propertyNames",)
        pattern_nodes = {sub | {f_idx}: v for sub, v in pattern_nodes.items()}
        pattern_nodes[frozenset({f_idx})] = additional if additional is not None else never
        for mask in range(1, 1 << f_idx):
            pattern_nodes[frozenset(i for i in range(f_idx) if mask >> i & 1)] = never
        additional = None
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
            props[r] = v if v is not None else sc.never()
    for r in s.get("$absent", []):            # names that must not appear (from not/dependentSchemas)
        props[r] = sc.never()
    max_props = None if s.get("maxProperties") is None else int(s["maxProperties"])
    return sc.add(ObjectNode(props, required, additional, int(s.get("minProperties", 0)), max_props,
                             tuple(pats), pattern_nodes, deps, pattern_text))
