"""Running a compiled grammar: the pushdown parser over IR nodes (parser.py, object_keys.py for property
names), token masks per parse stack (stack_masks.py), the shared `Grammar` (grammar.py), the per-request
`GrammarMatcher` (matcher.py) and jump-forward tokens (jump_forward.py)."""
