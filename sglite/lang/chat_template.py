"""Role blocks (`with s.user(): ...`) rendered with the model's own chat template.

The template is a function of a whole message list; a program appends text role by role. We recover each
role's prefix and suffix by rendering marker messages and diffing the renderings, once per backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Renderer = Callable[[list[dict], bool], str]   # (messages, add_generation_prompt) -> text
ROLES = ("system", "user", "assistant")
_A, _B, _C = "\x11SGLA\x12", "\x11SGLB\x12", "\x11SGLC\x12"


@dataclass(frozen=True)
class ChatTemplate:
    prefix: dict[str, str]          # role -> text before the content
    suffix: dict[str, str]          # role -> text after the content
    default_system: str = ""        # inserted when the first role block is not a system block
    name: str = "custom"

    def begin(self, role: str, first_role: bool) -> str:
        self._check(role)
        head = self.default_system if first_role and role != "system" else ""
        return head + self.prefix[role]

    def end(self, role: str) -> str:
        self._check(role)
        return self.suffix[role]

    def _check(self, role: str) -> None:
        if role not in self.prefix:
            raise ValueError(f"unknown role {role!r}; use one of {sorted(self.prefix)}")

    @classmethod
    def chatml(cls, default_system: str = "") -> "ChatTemplate":
        pre = {r: f"<|im_start|>{r}\n" for r in ROLES}
        suf = {r: "<|im_end|>\n" for r in ROLES}
        return cls(pre, suf, default_system, name="chatml")

    @classmethod
    def plain(cls) -> "ChatTemplate":
        """For base models without a template: 'Role: content' lines."""
        pre = {r: f"{r.capitalize()}: " for r in ROLES}
        suf = {r: "\n" for r in ROLES}
        return cls(pre, suf, "", name="plain")

    @classmethod
    def from_renderer(cls, render: Renderer, name: str = "model") -> "ChatTemplate":
        """Derive role prefixes/suffixes from a template renderer (e.g. Tokenizer.apply_chat_template)."""
        sys1 = render([{"role": "system", "content": _A}], False)
        two = render([{"role": "system", "content": _A}, {"role": "user", "content": _B}], False)
        three = render([{"role": "system", "content": _A}, {"role": "user", "content": _B},
                        {"role": "assistant", "content": _C}], False)
        if not (two.startswith(sys1) and three.startswith(two)):
            raise ValueError("chat template is not append-only; cannot split it into role blocks")
        prefix, suffix = {}, {}
        for role, segment, marker in (("system", sys1, _A), ("user", two[len(sys1):], _B),
                                      ("assistant", three[len(two):], _C)):
            before, _, after = segment.partition(marker)
            prefix[role], suffix[role] = before, after
        user_only = render([{"role": "user", "content": _B}], False)
        head = user_only.partition(_B)[0]
        default_system = head[:-len(prefix["user"])] if prefix["user"] and head.endswith(prefix["user"]) else ""
        return cls(prefix, suffix, default_system, name=name)
