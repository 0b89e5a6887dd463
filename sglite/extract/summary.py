"""Summary: what the job's output holds, for the closing report: how many records validated and, per top-level
field of the schema, how often a valid record gave it as null, as empty ("", whitespace, [] or {}) or left it
out. A field that is often empty points at the prompt or the documents, not at the decoder."""
from __future__ import annotations

from typing import Any


class Summary:
    def __init__(self, schema: dict[str, Any]):
        props = schema.get("properties")
        self.fields = list(props) if isinstance(props, dict) else []
        self.lines = self.valid = 0
        self.null = dict.fromkeys(self.fields, 0)
        self.empty = dict.fromkeys(self.fields, 0)
        self.absent = dict.fromkeys(self.fields, 0)

    def add(self, line: dict[str, Any]) -> None:
        """Count one output line (`{"id", "record"}` or a failure with "error")."""
        self.lines += 1
        if "error" in line:
            return
        self.valid += 1
        record = line.get("record")
        if not isinstance(record, dict):
            return
        for name in self.fields:
            if name not in record:
                self.absent[name] += 1
            elif record[name] is None:
                self.null[name] += 1
            elif _is_empty(record[name]):
                self.empty[name] += 1

    @property
    def failed(self) -> int:
        return self.lines - self.valid

    def table(self) -> str:
        """Per field: null / empty / absent counts over the valid records (percent in brackets)."""
        if not self.fields or not self.valid:
            return ""
        width = max(len("field"), *(len(f) for f in self.fields))
        rows = [f"{'field':<{width}}  {'null':>12}  {'empty':>12}  {'absent':>12}"]
        for f in self.fields:
            cells = (_count(c[f], self.valid) for c in (self.null, self.empty, self.absent))
            rows.append(f"{f:<{width}}  " + "  ".join(f"{c:>12}" for c in cells))
        return "\n".join(rows)


def _is_empty(value: Any) -> bool:
    return (isinstance(value, str) and not value.strip()) or (isinstance(value, (list, dict)) and not value)


def _count(n: int, of: int) -> str:
    return f"{n} ({100 * n / of:.0f}%)" if n else "0"
