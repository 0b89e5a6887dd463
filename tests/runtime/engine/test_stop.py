"""StopChecker: stop strings found when they span token boundaries; streaming never shows a partial stop."""
from __future__ import annotations

from sglite.runtime.engine.stop import StopChecker


def push_all(checker, tok, text):
    ids = tok.encode(text)
    for i, t in enumerate(ids):
        matched = checker.push([t])
        if matched:
            return matched, i
    return None, len(ids)


def test_stop_string_across_tokens(tokenizer):
    text = "The answer is 42. Question: what next?"
    ids = tokenizer.encode(text)
    # "is 4" spans the tokens " is", " ", "4" (digits are split) -- whatever the split, it crosses a boundary
    assert all("is 4" not in tokenizer.decode([t]) for t in ids)
    c = StopChecker(tokenizer, stop=["is 4"])
    matched, at = push_all(c, tokenizer, text)
    assert matched == "is 4"
    assert c.text == "The answer "
    assert at < len(ids) - 1


def test_no_stop_trim_keeps_the_stop(tokenizer):
    c = StopChecker(tokenizer, stop=["Question"], no_stop_trim=True)
    matched, _ = push_all(c, tokenizer, "The answer is 42. Question: what next?")
    assert matched == "Question" and c.text == "The answer is 42. Question"


def test_earliest_stop_wins(tokenizer):
    c = StopChecker(tokenizer, stop=["next", "answer"])
    matched, _ = push_all(c, tokenizer, "The answer is next")
    assert matched == "answer" and c.text == "The "


def test_stream_holds_back_partial_stop(tokenizer):
    c = StopChecker(tokenizer, stop=["STOP"])
    shown = ""
    for t in tokenizer.encode("abc ST"):
        c.push([t])
        shown += c.stream_delta(final=False)
    assert shown == "abc "  # "ST" could become "STOP"
    for t in tokenizer.encode("ART"):
        c.push([t])
        shown += c.stream_delta(final=False)
    shown += c.stream_delta(final=True)
    assert shown == "abc START" == c.text


def test_stream_of_stopped_text_never_contains_stop(tokenizer):
    c = StopChecker(tokenizer, stop=["STOP"])
    shown = ""
    for t in tokenizer.encode("abc STOP def"):
        if c.push([t]):
            break
        shown += c.stream_delta(final=False)
    shown += c.stream_delta(final=True)
    assert shown == "abc " == c.text
