"""The regex pre-scan that finds bare anchors and top-level alternation ignores escapes and character classes."""
from sglite.runtime.constrained.automata.regex import _has_bare, _top_level_alternation


def test_literal_bracket_first_in_class_does_not_end_it():
    assert not _top_level_alternation("[]|]x")      # '|' is a class member, not an alternation
    assert not _has_bare("[]$]x", "$")
    assert _top_level_alternation("a|[]]")


def test_escapes_and_groups():
    assert not _top_level_alternation(r"a\|b")
    assert not _top_level_alternation("(a|b)c")
    assert _has_bare("a$b", "$") and not _has_bare(r"a\$b", "$")
