"""JSON Schema -> grammar IR: `SchemaCompiler` (compiler.py) resolves `$ref`s (document.py), merges `allOf`
(merge.py), rewrites `not` (negation.py), proves `oneOf` alternatives disjoint (disjoint.py), and lowers what
remains per type (literals.py, numbers.py, strings.py, containers.py, seen through the `Lowerer` protocol)."""
