"""Jump-forward: tokens for text the grammar forces, tokenized so the model is not pushed off distribution.

Tokenizing forced text on its own can differ from how the same text would be tokenized once the model writes
what follows (forced `{"order`, model continues `Id"`, the vocabulary has `orderId`). So we commit only up to
a cut where no vocabulary token can straddle: start before the cut and end after it inside the forced text, or
run on past the forced text's end into a continuation the grammar allows (a token the grammar forbids there can
never be sampled, so it cannot cause drift). Every tokenization the model could produce then has a boundary at
the cut; the model samples the rest itself (MaskBench replay: 0 drifts, see bench/maskbench.py --jump-forward)."""
from __future__ import annotations


def jump_forward_tokens(tokenizer, matcher, min_backoff: int = 0) -> list[int]:
    """Token ids to append for the matcher's forced text (possibly empty). Does not advance the matcher; the
    caller appends the tokens and calls `matcher.accept_token` with each (every one is allowed)."""
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
    if not matcher.copy().accept_string(data):
        return []
    keep = len(ids)
    while keep > 0 and _crossed(index, data, starts[keep - 1] + len(tb[ids[keep - 1]]), matcher):
        keep -= 1
    keep = max(0, keep - min_backoff)
    out = ids[:keep]
    # the kept tokens must each be allowed in turn (they are, by construction; check cheaply anyway)
    m = matcher.copy()
    for k, t in enumerate(out):
        if not m.accept_token(t):
            return out[:k]
    return out


def _crossed(index, data: bytes, q: int, matcher) -> bool:
    """Whether some vocabulary token the grammar allows could straddle position q of the forced text: it starts
    before q and either ends inside the forced text after q, or the forced text from its start is a proper
    prefix of it and the grammar allows it there (`matcher`: the state before the forced text). A token the
    grammar rejects there can never be sampled, so it cannot make the model's text drift. If no token can
    straddle, every tokenization the model could produce has a boundary at q, so committing the tokens up to q
    cannot drift."""
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
            # the tokens below `node` start with data[p:] and go on past it: since every text from position p
            # starts with the forced data[p:], the grammar allows such a token at p exactly when its rest is a
            # valid continuation, so the mask at p (cached per parse state) answers for all of them at once
            at = matcher.copy()
            if at.accept_string(data[:p]) and at.allowed_mask()[index.tokens_below(node)].any():
                return True
    return False
