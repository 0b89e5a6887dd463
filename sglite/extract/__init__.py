"""`sglite extract`: a JSON-Schema extraction over a batch of documents, as a job one can trust.

    sglite extract --schema S.json --prompt P.txt --input docs.jsonl --output out.jsonl [--resume]

The prompt file holds the instructions (the system message), shared by every document, so its tokens are
prefilled once; if it contains `{text}`, the document is substituted there and the whole prompt is the user
message. Each output line is one document, appended the moment it finishes (completion order):

    {"id": <the document's id>, "record": {...}}                                  the record validated
    {"id": ..., "record": null, "error": "why", "raw": <generated text or null>}   it did not

Pieces: inputs.py (JSONL / CSV / text files -> Documents), preflight.py (checks before the model loads),
output.py (the append-only result file, resume), job.py (the program and its concurrent runs), progress.py,
summary.py, cli.py (options and the order of it all)."""
from __future__ import annotations

from .cli import main
from .errors import SetupError

__all__ = ["main", "SetupError"]
