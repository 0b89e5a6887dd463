"""The tokenizer built from GGUF metadata: round trips, agreement with transformers, chat template, streaming."""
from __future__ import annotations

import pytest

from sglite.runtime.tokenizer import IncrementalDetokenizer

CORPUS = [
    "Hello, world!",
    "  leading spaces and trailing  ",
    "Revenue rose 12.5% to $1,234.56 million in Q3 2024 (vs. $1,097.00m).",
    "你好，世界！营业收入同比增长百分之十二。",
    "Emoji 🎉🚀 and accents: café, naïve, Zürich, Ελληνικά, русский.",
    "def f(x):\n\treturn {'a': [1, 2, 3]}  # comment\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "Numbers 0 1 22 333 4444 55555 and 3.14159e-10",
    "\n\n\n   \t\t  mixed\r\nwhitespace",
    '{"company": "Acme Corp", "eps": -0.42, "risks": ["FX", "supply chain"]}',
]


def test_round_trip(tokenizer):
    for text in CORPUS:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token_id == 2
    assert tokenizer.vocab_size == 49152
    assert tokenizer.encode("<|im_end|>") == [2]
    assert 2 in tokenizer.special_token_ids
    assert tokenizer.decode([1, 2], skip_special_tokens=True) == ""


def test_token_bytes_undo_byte_level_aliases(tokenizer):
    space_a = tokenizer.encode(" a")
    assert len(space_a) == 1 and tokenizer.token_bytes(space_a[0]) == b" a"
    for text in CORPUS:
        ids = tokenizer.encode(text)
        assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode("utf-8")


def test_incremental_detokenizer_never_emits_half_characters(tokenizer):
    for text in CORPUS:
        ids = tokenizer.encode(text)
        detok = IncrementalDetokenizer(tokenizer)
        deltas = [detok.push([i]) for i in ids]
        deltas.append(detok.flush())
        assert all("\ufffd" not in d for d in deltas)
        assert "".join(deltas) == text


def test_chat_template(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")
    with pytest.raises(ValueError, match="role"):
        tokenizer.apply_chat_template([{"content": "no role"}])


@pytest.mark.slow
def test_matches_transformers_tokenizer(tokenizer):
    transformers = pytest.importorskip("transformers")
    from sglite.runtime.model_source import default_model_path

    path = default_model_path()
    ref = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in CORPUS:
        assert tokenizer.encode(text) == ref.encode(text, add_special_tokens=False), text
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert tokenizer.apply_chat_template(messages) == ref.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


def _folder_with(tmp_path, tokenizer, tokenizer_config: dict, jinja: str | None = None):
    import json

    tokenizer.hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", **tokenizer_config}))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    from sglite.runtime.tokenizer import _tokenizer_from_folder
    return _tokenizer_from_folder(tmp_path)


@pytest.mark.parametrize("tokenizer_config, jinja, template, source", [
    ({"chat_template": "A"}, None, "A", "tokenizer_config.json"),
    ({"chat_template": "A"}, "B", "B", "chat_template.jinja"),   # transformers: the .jinja file wins
    ({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}, None,
     "D", "tokenizer_config.json (chat_template 'default')"),
    ({}, None, None, None),
])
def test_folder_chat_template_source(tmp_path, tokenizer, tokenizer_config, jinja, template, source):
    tok = _folder_with(tmp_path, tokenizer, tokenizer_config, jinja)
    assert (tok.chat_template, tok.chat_template_source) == (template, source)
