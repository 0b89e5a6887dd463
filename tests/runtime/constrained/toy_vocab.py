"""A toy tokenizer (a few dozen tokens) with the interface GrammarCompiler reads, and brute-force reference masks.

GrammarCompiler needs from a tokenizer: `vocab_size`, `eos_token_id`, `special_token_ids`, `name` (cache key),
`all_token_bytes()` (raw bytes per id); jump-forward also calls `encode(text)`."""
from __future__ import annotations

import numpy as np

EOS = b"</s>"
SPECIAL = b"<|tool|>"
PIECES = [
    # single bytes: digits, a few letters, JSON punctuation, space, backslash
    *[bytes([c]) for c in b"0123456789abcdeflnprstuxyzE{}[]\":,.-+ \\"],
    # multi-byte tokens, some straddling JSON structure
    b'{"', b'":', b'",', b'"}', b'"]', b'["', b"true", b"false", b"null", b"ab", b"12", b"00", b"e+", b'","',
    b'"a"', b'yz"', b'x"}', b"tr", b"ue",
    # UTF-8: a whole character, and its two bytes as tokens of their own (byte-level BPE has such tokens)
    "\u00e9".encode(), b"\xc3", b"\xa9",
]


class ToyTokenizer:
    """Ids: 0 = EOS, then PIECES, then one more special token. Immutable."""

    name = "toy"

    def __init__(self):
        self._bytes = [EOS, *PIECES, SPECIAL]
        assert len(set(self._bytes)) == len(self._bytes), "each piece once"
        self.vocab_size = len(self._bytes)
        self.eos_token_id = 0
        self.special_token_ids = frozenset({0, self.vocab_size - 1})
        self._longest = max(len(b) for b in PIECES)

    def all_token_bytes(self) -> list[bytes]:
        return list(self._bytes)

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]

    def encode(self, text: str) -> list[int]:
        """Greedy longest match over the text pieces (every text here is coverable: all ASCII used is a piece)."""
        data, ids, i = text.encode(), [], 0
        by_bytes = {b: t for t, b in enumerate(self._bytes) if t not in self.special_token_ids}
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                t = by_bytes.get(data[i:i + n])
                if t is not None:
                    ids.append(t)
                    i += n
                    break
            else:
                raise ValueError(f"toy vocabulary cannot spell {data[i:i + 1]!r}")
        return ids

    def decode(self, ids) -> str:
        return b"".join(self._bytes[t] for t in ids).decode("utf-8", errors="replace")


def check_masks(tokenizer: ToyTokenizer, grammar, viable, complete, max_states: int = 2_000) -> int:
    """Walk every byte prefix the grammar's tokens can reach (breadth-first, one matcher per distinct prefix)
    and check at each: the mask allows text token t iff `viable(prefix + bytes(t))`, EOS iff
    `complete(prefix)`, special tokens never; `advance` agrees with the mask. Returns the prefixes checked."""
    tb = tokenizer.all_token_bytes()
    todo = [(b"", grammar.matcher())]
    seen = {b""}
    checked = 0
    while todo and checked < max_states:
        prefix, m = todo.pop(0)
        want = np.zeros(tokenizer.vocab_size, bool)
        for t in range(tokenizer.vocab_size):
            if t not in tokenizer.special_token_ids:
                want[t] = viable(prefix + tb[t])
        want[tokenizer.eos_token_id] = complete(prefix)
        got = m.allowed_mask()
        assert (got == want).all(), (prefix, [tb[t] for t in np.nonzero(got != want)[0]], "grammar allows" if
                                     got[np.nonzero(got != want)[0][0]] else "grammar forbids")
        checked += 1
        for t in np.nonzero(want)[0].tolist():
            if t == tokenizer.eos_token_id:
                continue
            nxt = prefix + tb[t]
            child = m.copy()
            assert child.accept_token(t), (prefix, tb[t])
            if nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, child))
        for t in np.nonzero(~want)[0].tolist():
            assert not m.copy().accept_token(t), (prefix, tb[t])
    return checked
