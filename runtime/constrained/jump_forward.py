"""Jump-forward: tokens for text the grammar forces, tokenized so the model is not pushed off distribution.

Tokenizing forced text on its own can differ from how the same text would be tokenized once the model writes
what follows (forced `{"order`, model continues `Id"`, the vocabulary has `orderId`). So we drop trailing tokens
while some vocabulary token could start inside the last kept token and run past the end of the forced text;
the model then samples that part itself."""
from __future__ import annotations


def jump_forward_tokens(tokenizer, matcher, min_backoff: int = 0) -> list[int]:
    """Token ids to append for the matcher's forced text (possibly empty). Does not advance the matcher; the
    caller appends the tokens and calls `matcher.advance` with each (every one is allowed)."""
    data = matcher.forced_bytes()
    if not data:
        return []
    index = matcher.grammar.index
    text = data.decode("utf-8", errors="ignore")
    ids = tokenizer.encode(text)
    tb = index.token_bytes
    if b"".join(tb[i] for i in ids) != data:
        # forced bytes end inside a character, or the tokenizer normalises: use the whole-character prefix
        cut = text.encode("utf-8")
        ids = tokenizer.encode(cut.decode("utf-8"))
        data = cut
        if b"".join(tb[i] for i in ids) != data:
            return []
    starts = []
    pos = 0
    for i in ids:
        starts.append(pos)
        pos += len(tb[i])
    keep = len(ids)
    while keep > 0 and _may_span(index, data, starts[keep - 1], starts[keep - 1] + len(tb[ids[keep - 1]])):
        keep -= 1
    keep = max(0, keep - min_backoff)
    out = ids[:keep]
    # the kept tokens must each be allowed in turn (they are, by construction; check cheaply anyway)
    m = matcher.copy()
    for k, t in enumerate(out):
        if not m.advance(t):
            return out[:k]
    return out


def _may_span(index, data: bytes, start: int, stop: int) -> bool:
    """Whether a vocabulary token starting inside data[start:stop] (the last kept token) could run past the
    end of the forced text, i.e. data[p:] is a proper prefix of some token for a p in [start, stop)."""
    children = index.children
    for p in range(start, stop):
        node = 0
        for b in data[p:]:
            node = children[node].get(b)
            if node is None:
                break
        else:
            if children[node]:     # data[p:] is a proper prefix of some token
                return True
    return False
