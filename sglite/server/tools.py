"""Tool calling for /v1/chat/completions: what `tools` + `tool_choice` ask (ToolPlan), how tool definitions,
earlier calls and tool results enter the prompt, the JSON schema a call is generated under, and the call text
turned into OpenAI's `tool_calls` (whole, or as stream deltas).

With `required` or a named function the whole reply is one JSON object `{"name": <function>, "arguments": {...}}`
under the schema `call_schema` builds (an anyOf over the callable functions, each with its own parameters
schema), so its arguments always parse and validate. With `auto` the reply is generated under a structural tag
(`structural_tag`): free text, in which each `<tool_call>` the model writes goes on as one call of an offered
function, `<tool_call>\n{"name": <function>, "arguments": <arguments under its schema>}\n</tool_call>`, then free
text again; tool_reply.ToolReplyText splits such a reply into content and calls. Earlier calls are shown to the
model in that same tagged form."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sglite.protocol import closed_schema

from .bodies import ChatCompletionRequest, Tool
from .api_errors import bad_request

TOOL_CALL_TRIGGER = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_CALL_END = "}\n" + TOOL_CALL_CLOSE    # a raw newline never occurs inside JSON strings: the first one ends the call
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"arguments"\s*:\s*')   # a call's text up to its arguments


@dataclass(frozen=True)
class ToolPlan:
    """`mode`: 'auto' (text or a call) or 'required' (a call; a named tool_choice is 'required' over that one
    function). `tools`: every function offered (all of them go in the prompt); `callable`: those a call may
    name."""
    mode: str
    tools: tuple[Tool, ...]
    callable: tuple[Tool, ...]

    @property
    def call_schema(self) -> dict[str, Any]:
        """JSON schema of one call: {"name": const, "arguments": the function's parameters}, anyOf the functions."""
        options = [{"type": "object", "properties": {"name": {"const": t.function.name}, "arguments": _arguments(t)},
                    "required": ["name", "arguments"], "additionalProperties": False} for t in self.callable]
        return options[0] if len(options) == 1 else {"anyOf": options}

    @property
    def structural_tag(self) -> dict[str, Any]:
        """For `auto`: free text, where `<tool_call>` starts a call of one of the functions (its name fixed by the
        structure's begin, its arguments under the function's schema), ended by `}\n</tool_call>`."""
        return {"structures": [{"begin": call_begin(t.function.name), "schema": _arguments(t), "end": _CALL_END}
                               for t in self.callable], "triggers": [TOOL_CALL_TRIGGER]}


def call_begin(name: str) -> str:
    """A tagged call's text up to its arguments."""
    return f'{TOOL_CALL_TRIGGER}\n{{"name": {json.dumps(name)}, "arguments": '


def _arguments(t: Tool) -> Any:
    """The schema of a call's arguments; `strict: true` closes its objects, as OpenAI's strict mode does."""
    params = t.function.parameters if t.function.parameters is not None else {"type": "object"}
    return closed_schema(params) if t.function.strict else params


def tool_plan(req: ChatCompletionRequest) -> ToolPlan | None:
    """What the request's tools ask, or None (no tools, or tool_choice 'none'). Raises APIError(400)."""
    choice = req.tool_choice
    if not req.tools:
        if choice is not None and choice != "none":
            raise bad_request("'tool_choice' needs 'tools'", param="tool_choice")
        return None
    names = [t.function.name for t in req.tools]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise bad_request(f"tool names must be unique, got {sorted(dup)} more than once", param="tools")
    if choice is None or choice == "auto":
        return ToolPlan("auto", tuple(req.tools), tuple(req.tools))
    if choice == "none":
        return None
    if choice == "required":
        return ToolPlan("required", tuple(req.tools), tuple(req.tools))
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
        if name in names:
            return ToolPlan("required", tuple(req.tools), tuple(t for t in req.tools if t.function.name == name))
        if name is not None:
            raise bad_request(f"tool_choice names function {name!r}, which is not among the tools {names}",
                              param="tool_choice")
    raise bad_request("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                      f"{{\"name\": ...}}}}, got {choice!r}", param="tool_choice")


def tools_prompt(plan: ToolPlan) -> str:
    """The system-prompt text that offers the functions and says how to call one."""
    lines = ["You can call functions. Each is given as JSON with its name, what it does, and the JSON Schema of its "
             "arguments:"]
    for t in plan.tools:
        f = t.function
        entry = {"name": f.name, "description": f.description or "", "parameters": f.parameters or {"type": "object"}}
        lines.append(json.dumps(entry, ensure_ascii=False))
    how = 'reply with only a JSON object {"name": <function name>, "arguments": <arguments object>}'
    if plan.mode == "auto":
        lines.append(f'To call a function, write {TOOL_CALL_TRIGGER}\n{{"name": <function name>, "arguments": '
                     f'<arguments object>}}\n{TOOL_CALL_CLOSE}. You may write text before and after, and call '
                     'several functions. Otherwise answer normally.')
    elif len(plan.callable) == 1 and len(plan.tools) > 1:
        lines.append(f"Call the function {plan.callable[0].function.name}: {how}.")
    else:
        lines.append(f"Call one of these functions: {how}.")
    return "\n".join(lines)


def render_tool_messages(messages: list[dict[str, Any]], plan: ToolPlan | None, tool_role: bool
                         ) -> list[dict[str, Any]]:
    """Messages for the chat template: the tools offered in the system message; an assistant's earlier
    `tool_calls` written as tagged calls (as `auto` generates them); a tool result as role 'tool' when the
    template knows that role (`tool_role`), else as a user message saying which call it answers."""
    names: dict[str, str] = {}   # tool_call_id -> function name
    out = []
    for m in messages:
        m = dict(m)
        calls = m.pop("tool_calls", None)
        if m["role"] == "assistant" and calls:
            texts = [m["content"]] if m.get("content") else []
            for c in calls:
                fn = c.get("function") or {}
                names[c.get("id", "")] = fn.get("name", "")
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = fn.get("arguments")
                call = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
                texts.append(f"{TOOL_CALL_TRIGGER}\n{call}\n{TOOL_CALL_CLOSE}")
            m["content"] = "\n".join(texts)
        elif m["role"] == "tool" and not tool_role:
            call_id = m.pop("tool_call_id", None)
            name = m.pop("name", None) or names.get(call_id or "", "")
            label = f"{name} ({call_id})" if name and call_id else (name or call_id or "the function")
            m = {**m, "role": "user", "content": f"Result of {label}:\n{m.get('content') or ''}"}
        out.append(m)
    if plan is not None:
        text = tools_prompt(plan)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{text}" if out[0]["content"] else text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


class ToolCallText:
    """A call's JSON text, fed as it is generated, turned into OpenAI tool_call deltas: the first carries id,
    type and name (once the text has reached the arguments), the others pieces of `arguments`, which is the
    generated arguments text itself. If the text does not start `{"name": ..., "arguments": ` (another
    property order), it is parsed whole at the end."""

    def __init__(self, index: int = 0) -> None:
        self.index = index   # of this call among the reply's calls
        self.id = f"call_{uuid.uuid4().hex[:24]}"
        self.text = ""
        self.name: str | None = None
        self.args_at = 0     # where the arguments start in text, once the name is known
        self.sent = 0        # characters of the arguments already handed out

    def feed(self, delta: str, final: bool) -> list[dict[str, Any]]:
        """Deltas (OpenAI's `tool_calls` entries) for `delta`; `final` once the generation ended."""
        self.text += delta
        out = []
        if self.name is None:
            m = _HEAD.match(self.text)
            if m is not None and (m.end() < len(self.text) or final):   # blanks before the arguments all read
                self.name, self.args_at = m.group(1), m.end()
            elif final:
                return self._whole()
            else:
                return []
            out.append({"index": self.index, "id": self.id, "type": "function",
                        "function": {"name": self.name, "arguments": ""}})
        args = self.text[self.args_at:]
        if final:
            end = len(args.rstrip())
            end = end - 1 if end and args[end - 1] == "}" else end   # the call object's own closing brace
            end = len(args[:end].rstrip())
        else:   # hold back what may be the closing of the call object
            end = max(len(args.rstrip()) - 1, self.sent)
        if end > self.sent:
            out.append({"index": self.index, "function": {"arguments": args[self.sent:end]}})
            self.sent = end
        return out

    def _whole(self) -> list[dict[str, Any]]:
        call = parse_call(self.text)
        if call is None:
            return []
        self.name = call[0]
        return [{"index": self.index, "id": self.id, "type": "function", "function": {"name": call[0], "arguments": call[1]}}]


def parse_call(text: str) -> tuple[str, str] | None:
    """(name, arguments JSON text) of a complete call, or None if `text` is not one."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not isinstance(obj.get("arguments"), dict):
        return None
    m = _HEAD.match(text)
    if m is not None:   # the generated text of the arguments, as streamed, when it is exactly them
        args = text[m.end():].rstrip()[:-1].rstrip()
        try:
            if json.loads(args) == obj["arguments"]:
                return obj["name"], args
        except json.JSONDecodeError:
            pass
    return obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)


def tool_call_message(text: str) -> list[dict[str, Any]] | None:
    """The `tool_calls` of a reply that is a complete call, or None."""
    call = parse_call(text)
    if call is None:
        return None
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call[0], "arguments": call[1]}}]
