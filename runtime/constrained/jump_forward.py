"""Jump-forward: tokens for text the grammar forces, tokenized so the model is not pushed off distribution.

Tokenizing forced text on its own can differ from how the same text would be tokenized once the model writes
what follows (forced `{"order`, model continues `Id"`, the vocabulary has `orderId`). So we commit only up to
a cut where no vocabulary token can straddle: start before the cut and end after it inside the forced text, or
run on past the forced text's end. Every tokenization of the final text then has a boundary at the cut; the
model samples the rest itself (MaskBench replay: 0 drifts, see bench/maskbench.py --jump-forward)."""
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
    while keep > 0 and _crossed(index, data, starts[keep - 1] + len(tb[ids[keep - 1]])):
        keep -= 1
    keep = max(0, keep - min_backoff)
    out = ids[:keep]
    # the kept tokens must each be allowed in turn (they are, by construction; check cheaply anyway)
    m = matcher.copy()
    for k, t in enumerate(out):
        if not m.advance(t):
            return out[:k]
    return out


def _crossed(index, data: bytes, q: int) -> bool:
    """Whether some vocabulary token could straddle position q of the forced text: it starts before q and
    either ends inside the forced text after q, or the forced text from its start is a proper prefix of it
    (so it could run on into what the model writes next). If none can, every tokenization of the final text
    has a token boundary at q, so committing the tokens up to q cannot drift."""
    children, ends = index.children, index.ends
    for p in range(max(0, q - index.max_depth), q):
        node = 0
        for i in range(p, len(data)):
            node = children[node].get(data[i])
            if node is None:
                break
            if i + 1 > q and ends[node]:
                return True
        else:
            if children[node]:
                return True
    return False
