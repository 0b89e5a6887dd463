"""The defaults of the settings that more than one layer reads (the engine's config, the server's flags, the
grammar backend, the grammar compiler), each defined here once and imported wherever it is needed. Plain
constants: importing this module costs nothing."""

# generated JSON: one space after each ':' and ',' (`{"a": 1, "b": 2}`); the modes a generation may ask for.
# "any" is the exact matcher's reading (any whitespace RFC 8259 allows, any escapes): GrammarCompiler's default,
# since a compiled schema checks JSON as JSON is defined unless a generation convention is asked for
JSON_WHITESPACE = "standard"
JSON_WHITESPACE_MODES = ("compact", "standard", "flexible", "any")
MATCH_WHITESPACE = "any"
# generated objects: named properties in the order the schema lists them ("any": in any order, the matcher's)
JSON_PROPERTY_ORDER = "schema"
PROPERTY_ORDERS = ("schema", "any")
MATCH_PROPERTY_ORDER = "any"
# every compiled grammar artefact kept (grammars, automata, token-index tables, mask caches), in bytes
GRAMMAR_CACHE_BYTES = 512 * 2**20
# wall time one constraint's compile may take, its first mask included
GRAMMAR_COMPILE_BUDGET_S = 4.0
