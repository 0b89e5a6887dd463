"""Parser caches: what the parser caches per (node, byte) equals what it computes from scratch."""
from sglite.runtime.constrained.parser.frames import END, OBJ_VALUED, Obj

SCHEMAS = [
    {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"type": "array"},
               {"type": "string", "pattern": "^x+$"}, {"type": "number"}, {"enum": ["red", 1, None, True]},
               {"$ref": "#"}]},
    {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "null"},
                                                     {"type": "string", "minLength": 2}]},
                                      "w": {"type": "array", "items": {"type": ["boolean", "string"]}}}},
]


def test_start_value_cache_equals_uncached(compiler):
    """`Parser._start_value` from its (node, byte) cache equals the uncached walk over the node's alternatives
    (a non-empty `visiting` bypasses the cache) for every node, every byte and several stacks below; and the
    cached first bytes equal `_first`."""
    checked = 0
    for schema in SCHEMAS:
        g = compiler.compile_json_schema(schema)
        p = g.parser
        objs = [i for i, n in enumerate(g.nodes) if type(n).__name__ == "ObjectNode"]
        belows = [(END,)] + [(END, Obj(o, OBJ_VALUED, frozenset(), 1)) for o in objs[:2]]
        for nid in range(len(g.nodes)):
            assert p._first_bytes(nid) == frozenset(p._first(nid, set()))
            for below in belows:
                for b in range(256):
                    cached = p._start_value(below, nid, b)
                    assert cached == p._start_value(below, nid, b, frozenset({-1})), (schema, nid, b)
                    assert cached == p._start_value(below, nid, b)      # a hit, the same
                    checked += bool(cached)
    assert checked >= 50


def test_next_bytes_are_the_bytes_step_reads(compiler, tokenizer):
    """`Parser.next_bytes` (for a lexeme on top: its live bytes, and where it may end, what the stack below
    reads) is exactly the set of bytes `step` accepts, on every stack along valid documents: strings, counted
    strings, numbers, enums, names and whitespace runs."""
    import json
    docs = [(SCHEMAS[0], [{"a": 12}, "xxx", -1.5e3, "red", [1, "a"]]),
            (SCHEMAS[1], [{"v": "abc", "w": [True, "q"]}, {"v": 7}]),
            ({"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}}}, [{"s": "ab"}])]
    checked = 0
    for schema, values in docs:
        g = compiler.compile_json_schema(schema)
        p = g.parser
        for v in values:
            m = g.matcher()
            for t in tokenizer.encode(json.dumps(v)):
                for st in m._stacks:
                    assert p.next_bytes(st) == frozenset(b for b in range(256) if p.step(st, b)), st
                    checked += 1
                assert m.accept_token(t)
    assert checked >= 40
