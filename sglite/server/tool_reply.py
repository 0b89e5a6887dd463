"""ToolReplyText: a `tool_choice: "auto"` reply (generated under ToolPlan.structural_tag), fed as it is generated,
split into OpenAI's `content` and `tool_calls` deltas. The whole reply is the same split fed at once
(`split_reply`), so a streamed choice and a whole one always agree.

Content is the free text with blanks dropped at its start, before each call and at its end; text that may be
the start of a `<tool_call>` trigger is held back until it is known not to be. A call's text between the trigger
and `</tool_call>` goes through tools.ToolCallText (id, type and name first, then pieces of `arguments`); a
call cut off before its name is known is handed out as content."""
from __future__ import annotations

from typing import Any

from .tools import TOOL_CALL_CLOSE, TOOL_CALL_TRIGGER, ToolCallText


class ToolReplyText:
    def __init__(self) -> None:
        self.buf = ""                     # fed text not yet handed out
        self.call: ToolCallText | None = None   # the call being read, from just after its trigger
        self.calls = 0                    # calls started
        self.named = 0                    # calls whose name is known (handed out as tool_calls)
        self.started = False              # whether any content was handed out (leading blanks are dropped)

    def feed(self, delta: str, final: bool) -> dict[str, Any]:
        """OpenAI's delta for `delta` ({"content": ...} and/or {"tool_calls": [...]}, possibly {}); `final` once
        the generation ended (then everything held back is handed out)."""
        self.buf += delta
        content, pieces = "", []
        while True:
            if self.call is None:
                at = self.buf.find(TOOL_CALL_TRIGGER)
                if at < 0:
                    cut = len(self.buf) if final else _safe_end(self.buf, TOOL_CALL_TRIGGER)
                    content += self._content(self.buf[:cut].rstrip() if final else self.buf[:cut])
                    self.buf = "" if final else self.buf[cut:]
                    break
                content += self._content(self.buf[:at].rstrip())
                self.buf = self.buf[at + len(TOOL_CALL_TRIGGER):]
                self.call = ToolCallText(index=self.named)
                self.calls += 1
                continue
            end = self.buf.find(TOOL_CALL_CLOSE)
            done = end >= 0 or final
            body = self.buf[:end] if end >= 0 else self.buf if final else self.buf[:_safe_end(self.buf, TOOL_CALL_CLOSE)]
            got = self.call.feed(body, final=done)
            pieces += got
            self.buf = self.buf[end + len(TOOL_CALL_CLOSE):] if end >= 0 else "" if final else self.buf[len(body):]
            if not done:
                break
            if self.call.name is None:   # cut off before its name: what the model wrote stays text
                content += self._content(TOOL_CALL_TRIGGER + self.call.text + (TOOL_CALL_CLOSE if end >= 0 else ""))
            else:
                self.named += 1
            self.call = None
            if end < 0:
                break
        out: dict[str, Any] = {}
        if content:
            out["content"] = content
        if pieces:
            out["tool_calls"] = pieces
        return out

    def _content(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        return text


def _safe_end(text: str, literal: str) -> int:
    """Where `text` can be handed out up to: before the longest suffix that is a prefix of `literal`, and before
    the blanks that precede it (they are dropped if a call follows)."""
    cut = len(text)
    for k in range(min(len(literal) - 1, len(text)), 0, -1):
        if text.endswith(literal[:k]):
            cut = len(text) - k
            break
    return cut if literal == TOOL_CALL_CLOSE else len(text[:cut].rstrip())


def split_reply(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a whole `auto` reply, as the message of a non-streamed choice: content None when
    the reply is only calls."""
    d = ToolReplyText().feed(text, final=True)
    calls: list[dict[str, Any]] = []
    for p in d.get("tool_calls", ()):
        if "id" in p:
            calls.append({"id": p["id"], "type": "function", "function": dict(p["function"])})
        else:
            calls[p["index"]]["function"]["arguments"] += p["function"]["arguments"]
    content = d.get("content", "")
    return (content or None) if calls else content, calls
