"""SGLang's regexes for typed output, importable as `sglite.lang.ir.REGEX_INT` as in SGLang."""

# SGLang's regexes for typed output (`from sglang.lang.ir import REGEX_INT`), with its values: programs pass
# them as gen(regex=...), a number with stop=[" ", "\n"] (its trailing spaces or newlines let a stop string
# end it). gen(dtype=...) uses sampling.DTYPES, which end at the same places.
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""   # letters, digits and whitespace in quotes; gen(dtype=str) uses a JSON string
