"""Tokenizer: byte-level BPE built from GGUF metadata (or a tokenizer.json), chat templates, and
incremental detokenization that never emits half a UTF-8 character.

Public API (kept stable for external checks):
    tok = load_tokenizer(model=None)
    tok.encode(text) -> list[int]; tok.decode(ids) -> str; tok.eos_token_id; tok.vocab_size
    tok.apply_chat_template(messages, add_generation_prompt=True) -> str
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from .model_source import resolve_model_path

# GGUF token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-unicode alias of each byte, inverted: 'Ġ' -> 0x20."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Tokenizer:
    """Wraps a `tokenizers.Tokenizer` with the model's special tokens and chat template. Immutable."""

    def __init__(self, hf_tokenizer, *, eos_token_id: int | None, bos_token_id: int | None,
                 add_bos_token: bool, chat_template: str | None, special_ids: Iterable[int], byte_level: bool,
                 name: str, chat_template_source: str | None = None):
        self.hf = hf_tokenizer
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id
        self.add_bos_token = add_bos_token
        self.chat_template = chat_template
        self.chat_template_source = chat_template_source  # where the template came from, for the model card
        self.special_token_ids = frozenset(special_ids)
        self.byte_level = byte_level
        self.name = name  # identifies the vocabulary (cache key for compiled grammars)
        self.vocab_size = hf_tokenizer.get_vocab_size(with_added_tokens=True)
        self._template = None
        self._token_bytes: list[bytes] | None = None

    # --- text <-> ids -------------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Special tokens written in the text (e.g. '<|im_start|>') map to their ids.
        A BOS token is prepended only when add_special_tokens and the model wants one."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        ids = self.hf.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.hf.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token stands for (special tokens: their text in UTF-8)."""
        return self.all_token_bytes()[token_id]

    def all_token_bytes(self) -> list[bytes]:
        """Raw bytes of every token id, index = id. Computed once."""
        if self._token_bytes is None:
            dec = _byte_decoder()
            out = []
            for i in range(self.vocab_size):
                piece = self.hf.id_to_token(i) or ""
                if i in self.special_token_ids or not self.byte_level:
                    out.append(self._sentencepiece_bytes(piece) if not self.byte_level and i not in self.special_token_ids
                               else piece.encode("utf-8"))
                else:
                    out.append(bytes(dec[c] for c in piece) if all(c in dec for c in piece) else piece.encode())
            self._token_bytes = out
        return self._token_bytes

    @staticmethod
    def _sentencepiece_bytes(piece: str) -> bytes:
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")

    # --- chat ---------------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render messages ([{"role", "content"}]) with the model's own jinja2 template."""
        if self.chat_template is None:
            raise ValueError(f"tokenizer {self.name!r} has no chat template (a base model): send a plain prompt, "
                             "not chat messages or role blocks, or use a model that has one")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {m!r}")
        if self._template is None:
            import jinja2.sandbox

            env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

            def raise_exception(msg):
                raise jinja2.exceptions.TemplateError(msg)
            env.globals["raise_exception"] = raise_exception
            self._template = env.from_string(self.chat_template)
        bos = self.id_to_token(self.bos_token_id) if self.bos_token_id is not None else ""
        eos = self.id_to_token(self.eos_token_id) if self.eos_token_id is not None else ""
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                     bos_token=bos, eos_token=eos)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size})"


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas; holds back bytes of an incomplete UTF-8 character.

    Decodes a short window that starts one emitted step back, so tokenizers whose decoding depends on the
    previous token (SentencePiece's leading space) stream correctly too. Invariant: the concatenation of all
    returned deltas (after flush) == tok.decode(all ids)."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self.tok = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix_offset = 0  # window start: ids[_prefix_offset:_read_offset] were decoded last step
        self._read_offset = 0    # ids before this are emitted

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_ids: Iterable[int]) -> str:
        self.ids.extend(token_ids)
        prefix = self._decode(self.ids[self._prefix_offset:self._read_offset])
        text = self._decode(self.ids[self._prefix_offset:])
        if len(text) <= len(prefix) or text.endswith("\ufffd"):
            return ""  # nothing new, or the last character is still incomplete
        self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
        return text[len(prefix):]

    def flush(self) -> str:
        """Whatever is held back at the end of the sequence (a dangling partial character decodes as U+FFFD)."""
        prefix = self._decode(self.ids[self._prefix_offset:self._read_offset])
        text = self._decode(self.ids[self._prefix_offset:])
        self._prefix_offset = self._read_offset = len(self.ids)
        return text[len(prefix):]


def _tokenizer_from_gguf(path: Path) -> Tokenizer:
    from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    from .gguf_loader import GGUFError, open_gguf

    gguf_file = open_gguf(str(path.resolve()))
    meta = gguf_file.tokenizer_metadata()
    if meta.model == "llama" and gguf_file.architecture in GEMMA_ARCHITECTURES:
        return _gemma_from_gguf(path, meta)
    if meta.model == "llama":
        return _sentencepiece_from_gguf(path, meta)
    if meta.model != "gpt2":
        raise GGUFError(f"GGUF file {str(path)!r} has tokenizer model {meta.model!r}; sglite builds byte-level BPE "
                        "('gpt2') and SentencePiece BPE ('llama') tokenizers from GGUF. Use a Hugging Face folder "
                        "with tokenizer.json instead.")
    vocab = {t: i for i, t in enumerate(meta.tokens)}
    merges = [tuple(m.split(" ", 1)) for m in meta.merges]
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    hf = HFTokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if meta.pre in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"):
        # llama.cpp splits every digit first for these vocabularies, then applies the GPT-2 regex
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif meta.pre in (None, "default", "gpt2", "gpt-2", "mpt", "olmo", "jais"):
        hf.pre_tokenizer = byte_level
    else:
        raise GGUFError(f"GGUF file {str(path)!r} uses pre-tokenizer {meta.pre!r}, which sglite does not "
                        "reproduce exactly; use the model's Hugging Face folder (tokenizer.json) instead")
    hf.decoder = decoders.ByteLevel()
    special = [i for i, t in enumerate(meta.token_types) if t in (CONTROL, USER_DEFINED)]
    hf.add_special_tokens([AddedToken(meta.tokens[i], special=True, normalized=False) for i in special])
    return Tokenizer(hf, eos_token_id=meta.eos_token_id, bos_token_id=meta.bos_token_id,
                     add_bos_token=meta.add_bos_token, chat_template=meta.chat_template, special_ids=special,
                     byte_level=True, name=f"gguf:{path.name}:{len(meta.tokens)}",
                     chat_template_source=_GGUF_TEMPLATE_SOURCE if meta.chat_template else None)


_GGUF_TEMPLATE_SOURCE = "GGUF metadata (tokenizer.chat_template)"


def merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges a SentencePiece vocabulary implies: every split of a token into two tokens, best score first.
    The same list (and order) as transformers' `generate_merges(vocab, vocab_scores)`, which its GGUF loader uses."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, score in dict(zip(tokens, scores)).items():
        local = [(piece[:i], piece[i:], score) for i in range(1, len(piece))
                 if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def _sentencepiece_from_gguf(path: Path, meta) -> Tokenizer:
    """A SentencePiece-BPE vocabulary (Llama 2, Mistral) built as transformers' GGUF loader builds it
    (LlamaTokenizer: byte fallback, Metaspace prepending '▁' to the first word), so ids agree with it."""
    from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    from .gguf_loader import GGUFError

    if meta.add_space_prefix is False:
        raise GGUFError(f"GGUF file {str(path)!r} sets tokenizer.ggml.add_space_prefix = false; transformers' GGUF "
                        "loader ignores it and llama.cpp honours it, so ids would depend on the reader. Use the "
                        "model's Hugging Face folder (tokenizer.json) instead")
    if meta.merges:
        merges = [tuple(m.split(" ", 1)) for m in meta.merges]
    elif meta.scores is not None:
        merges = merges_from_scores(meta.tokens, meta.scores)
    else:
        raise GGUFError(f"GGUF file {str(path)!r} has a SentencePiece vocabulary without tokenizer.ggml.scores or "
                        "merges; cannot rebuild its merges")
    vocab = {t: i for i, t in enumerate(meta.tokens)}
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    hf.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1, right=0)])
    special = [i for i, t in enumerate(meta.token_types) if t in (CONTROL, UNKNOWN)]
    hf.add_special_tokens([AddedToken(meta.tokens[i], special=True, normalized=False) for i in special])
    user = [i for i, t in enumerate(meta.token_types) if t == USER_DEFINED]
    hf.add_tokens([AddedToken(meta.tokens[i], special=False, normalized=False) for i in user])
    return Tokenizer(hf, eos_token_id=meta.eos_token_id, bos_token_id=meta.bos_token_id,
                     add_bos_token=meta.add_bos_token, chat_template=meta.chat_template, special_ids=special,
                     byte_level=False, name=f"gguf:{path.name}:{len(meta.tokens)}",
                     chat_template_source=_GGUF_TEMPLATE_SOURCE if meta.chat_template else None)


GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")


def _gemma_from_gguf(path: Path, meta) -> Tokenizer:
    """Gemma's SentencePiece-BPE vocabulary (262,144 tokens in Gemma 3) as transformers' GGUF loader builds it
    (GemmaTokenizer), so ids agree with it: spaces become '▁' with no prefix space, byte fallback for what no
    token covers. Two things the file spells its own way: a token of only spaces is stored with real spaces
    (respelled here as '▁'s, the way the merges and the normalized text spell it), and the file has no merges,
    which are rebuilt from the vocabulary ranked by each token's position in it (Gemma's scores do not follow its
    merge order; the order of the vocabulary does)."""
    from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, normalizers

    tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in meta.tokens]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = meta.merges and [tuple(m.split(" ", 1)) for m in meta.merges]
    if not merges:
        merges = merges_from_scores(tokens, [-float(i) for i in range(len(tokens))])
    unk = "<unk>" if "<unk>" in vocab else None           # GemmaTokenizer's unk_token
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True, unk_token=unk))
    hf.normalizer = normalizers.Replace(" ", "\u2581")
    hf.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    special = [i for i, t in enumerate(meta.token_types) if t in (CONTROL, UNKNOWN)]
    hf.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
    user = [i for i, t in enumerate(meta.token_types) if t == USER_DEFINED and tokens[i] == meta.tokens[i]]
    hf.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
    return Tokenizer(hf, eos_token_id=meta.eos_token_id, bos_token_id=meta.bos_token_id,
                     add_bos_token=meta.add_bos_token, chat_template=meta.chat_template, special_ids=special,
                     byte_level=False, name=f"gguf:{path.name}:{len(meta.tokens)}",
                     chat_template_source=_GGUF_TEMPLATE_SOURCE if meta.chat_template else None)


def _tokenizer_from_folder(folder: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    tj = folder / "tokenizer.json"
    if not tj.is_file():
        raise FileNotFoundError(f"model folder {str(folder)!r} has no tokenizer.json")
    hf = HFTokenizer.from_file(str(tj))
    cfg = {}
    if (folder / "tokenizer_config.json").is_file():
        cfg = json.loads((folder / "tokenizer_config.json").read_text())
    model_cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}

    def token_id(key: str) -> int | None:
        tok = cfg.get(key)
        if isinstance(tok, dict):
            tok = tok.get("content")
        if tok is not None:
            return hf.token_to_id(tok)
        value = model_cfg.get(key + "_id")
        return value[0] if isinstance(value, list) else value

    special = [hf.token_to_id(t.content) for t in hf.get_added_tokens_decoder().values() if t.special]
    template, source = _folder_chat_template(folder, cfg)
    pre = json.dumps(hf.to_str())
    return Tokenizer(hf, eos_token_id=token_id("eos_token"), bos_token_id=token_id("bos_token"),
                     add_bos_token=bool(cfg.get("add_bos_token", False)), chat_template=template,
                     special_ids=special, byte_level='"ByteLevel"' in pre, name=f"folder:{folder.resolve()}",
                     chat_template_source=source)


def _folder_chat_template(folder: Path, cfg: dict) -> tuple[str | None, str | None]:
    """(template, where from). As transformers: chat_template.jinja (what 5.x writes) wins over
    tokenizer_config.json's chat_template, which may be a string or a list of {name, template} (take 'default')."""
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(), "chat_template.jinja"
    template = cfg.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
        return template, ("tokenizer_config.json (chat_template 'default')" if template else None)
    return template, ("tokenizer_config.json" if template else None)


_cache: dict[str, Tokenizer] = {}


def load_tokenizer(model: str | os.PathLike | None = None) -> Tokenizer:
    """The tokenizer of `model` (a .gguf file or HF folder; default: SmolLM2-135M-Instruct). Cached per path."""
    path = resolve_model_path(model)
    key = str(path.resolve())
    if key not in _cache:
        _cache[key] = _tokenizer_from_folder(path) if path.is_dir() else _tokenizer_from_gguf(path)
    return _cache[key]
