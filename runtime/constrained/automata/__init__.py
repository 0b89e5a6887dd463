"""Automata for lexemes: regexes and word sets as character automata (charfsm.py, regex.py, intersect.py),
lowered to the byte DFAs the parser and the token index run (byte_dfa.py, dfa_lowering.py, key_dfa.py), and
the regex sources of JSON numbers and string formats (json_numbers.py, formats.py, digit_cap.py).
Depends on nothing else in the package but errors.py."""
