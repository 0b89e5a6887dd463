"""Summary: what the job's output holds, for the closing report: how many records validated and, per top-level
field of the schema, how often a valid record gave it as null, as empty ("", whitespace, [] or {}) or left it
out; where the lines carry spans, how many records have a value of the field that the document does not hold
("not found": the usual sign of an invented value); where records were re-asked, how many tries failed on the
field. A field that is often empty points at the prompt or the documents, not at the decoder."""
from __future__ import annotations

from typing import Any

from .spans import not_found_fields


class Summary:
    def __init__(self, schema: dict[str, Any]):
        props = schema.get("properties")
        self.fields = list(props) if isinstance(props, dict) else []
        self.lines = self.valid = 0
        self.null = dict.fromkeys(self.fields, 0)
        self.empty = dict.fromkeys(self.fields, 0)
        self.absent = dict.fromkeys(self.fields, 0)
        self.not_found = dict.fromkeys(self.fields, 0)
        self.retried = dict.fromkeys(self.fields, 0)
        self.with_spans = self.with_tries = self.conflicts = 0

    def add(self, line: dict[str, Any]) -> None:
        """Count one output line (`{"id", "record"}` or a failure with "error")."""
        self.lines += 1
        if "tries" in line:
            self.with_tries += 1
            for name in line.get("retried") or ():
                top = name.split(".")[0]
                if top in self.retried:
                    self.retried[top] += 1
        if "error" in line:
            return
        self.conflicts += bool(line.get("conflicts"))
        if isinstance(line.get("spans"), dict):
            self.with_spans += 1
            for name in not_found_fields(line["spans"]):
                if name in self.not_found:
                    self.not_found[name] += 1
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
        columns = [("null", self.null, self.valid), ("empty", self.empty, self.valid),
                   ("absent", self.absent, self.valid)]
        if self.with_spans:
            columns.append(("not found", self.not_found, self.with_spans))
        if self.with_tries:
            columns.append(("re-asked", self.retried, self.with_tries))
        rows = [f"{'field':<{width}}  " + "  ".join(f"{name:>12}" for name, _, _ in columns)]
        for f in self.fields:
            rows.append(f"{f:<{width}}  " + "  ".join(f"{_count(c[f], of):>12}" for _, c, of in columns))
        return "\n".join(rows)


def _is_empty(value: Any) -> bool:
    return (isinstance(value, str) and not value.strip()) or (isinstance(value, (list, dict)) and not value)


def _count(n: int, of: int) -> str:
    return f"{n} ({100 * n / of:.0f}%)" if n else "0"
