"""The grammar IR every frontend (regex, JSON Schema) lowers to: nodes that refer to each other by index, whose
lexemes are byte DFAs (automata/). Plain immutable data; the parser (parser/) runs it."""
