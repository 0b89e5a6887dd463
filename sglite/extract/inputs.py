"""The documents of an extraction job: JSONL lines, CSV rows, or whole .txt/.md files.

Every `--input` is a file, a directory (its .txt and .md files) or a glob (`'docs/*.md'`, `**` recurses); a
file is read by its suffix: .csv as CSV with a header row, .txt/.md as one document, anything else as JSONL.
Ids: a JSONL line's id field or else its line number, a CSV row's id column or else its row number (1 = the
first row under the header), a text file's name. Ids must be unique across all inputs: the output is joined
back to the inputs by them."""
from __future__ import annotations

import csv
import glob
import itertools
import json
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from .setup_error import SetupError

TEXT_SUFFIXES = (".txt", ".md")


class Document(NamedTuple):
    id: Any       # a JSON value, written as the output line's "id"
    text: str
    where: str    # "docs.jsonl:12", for messages


def id_key(doc_id: Any) -> str:
    """The canonical text of an id, so 7 and "7" stay different and a resumed output matches its inputs."""
    return json.dumps(doc_id, ensure_ascii=False, sort_keys=True)


def load_documents(inputs: list[str], text_field: str = "text", id_field: str = "id",
                   limit: int | None = None) -> list[Document]:
    """Every document of `inputs`, in order (the first `limit` only). Raises SetupError naming the file and
    line of the first problem, or the two places a duplicate id comes from."""
    stream = (doc for spec in inputs for path in _expand(spec) for doc in _read(path, text_field, id_field))
    docs = list(itertools.islice(stream, limit)) if limit else list(stream)
    seen: dict[str, Document] = {}
    for doc in docs:
        first = seen.setdefault(id_key(doc.id), doc)
        if first is not doc:
            raise SetupError(f"duplicate document id {doc.id!r} ({first.where} and {doc.where}); ids must be "
                             "unique, since output lines are matched to inputs by id (set --id-field)")
    return docs


def _expand(spec: str) -> list[Path]:
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        if not files:
            raise SetupError(f"{spec}: no .txt or .md files in this directory")
        return files
    if path.exists():
        return [path]
    if any(ch in spec for ch in "*?["):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        if not files:
            raise SetupError(f"{spec}: no files match this pattern")
        return files
    raise SetupError(f"{spec}: no such file or directory")


def _read(path: Path, text_field: str, id_field: str) -> Iterator[Document]:
    suffix = path.suffix.lower()
    try:
        if suffix in TEXT_SUFFIXES:
            yield Document(path.name, path.read_text(encoding="utf-8"), str(path))
        elif suffix == ".csv":
            yield from _read_csv(path, text_field, id_field)
        else:
            yield from _read_jsonl(path, text_field, id_field)
    except UnicodeDecodeError as e:
        raise SetupError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise SetupError(f"{path}: cannot read ({e.strerror or e})") from None


def _read_jsonl(path: Path, text_field: str, id_field: str) -> Iterator[Document]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SetupError(f"{path}:{n}: not JSON ({e}); JSONL input holds one JSON object per line") from None
            text = obj.get(text_field) if isinstance(obj, dict) else obj if isinstance(obj, str) else None
            if not isinstance(text, str):
                raise SetupError(f"{path}:{n}: no string field {text_field!r} (set --text-field)")
            doc_id = obj.get(id_field) if isinstance(obj, dict) else None
            yield Document(n if doc_id is None else doc_id, text, f"{path}:{n}")


def _read_csv(path: Path, text_column: str, id_column: str) -> Iterator[Document]:
    csv.field_size_limit(2**31 - 1)   # a document is one field; the default limit is 128 KiB
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if text_column not in columns:
            raise SetupError(f"{path}: no column {text_column!r} in the header ({', '.join(columns) or 'empty'}); "
                             "set --text-column")
        for n, row in enumerate(reader, 1):
            doc_id = row.get(id_column) if id_column in columns else None
            yield Document(n if doc_id in (None, "") else doc_id, row[text_column] or "", f"{path} row {n}")
