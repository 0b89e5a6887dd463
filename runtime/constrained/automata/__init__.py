"""Automata for lexemes: regexes and word sets as character automata (charfsm.py, regex.py, intersect.py),
lowered to the byte DFAs the parser and the token index run (byte_dfa.py, dfa_lowering.py, key_dfa.py), and
regex trees built in code (rx.py: what the number, literal, GBNF and whitespace lowerings pass, never regex
text) with the trees of JSON numbers (json_numbers.py), and the string formats (formats.py, digit_cap.py).
Depends on nothing else in the package but errors.py and budget.py."""
