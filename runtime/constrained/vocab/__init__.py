"""A tokenizer's vocabulary as a byte trie (vocab_trie.py; kernels/trie_walk_cpu.py scans it compiled), and every
token's fate under a lexeme DFA state, computed for all tokens at once and cached (token_index.py)."""
