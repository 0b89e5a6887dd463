"""`sglite extract`: a JSON-Schema extraction over a batch of documents, as a job one can trust.

    sglite extract --schema S.json --prompt P.txt --input docs.jsonl --output out.jsonl [--resume]
    for line in sglite.extract.extract(docs, Model, instructions): ...      # the same job from Python

The prompt file holds the instructions (the system message), shared by every document, so its tokens are
prefilled once; if it contains `{text}`, the document is substituted there and the whole prompt is the user
message (a model without a chat template gets plain text: the instructions, then the document). Each output line
is one document, appended the moment it finishes (completion order):

    {"id": <the document's id>, "record": {...}, "spans": {...}}                  the record validated
    {"id": ..., "record": null, "error": "why", "raw": <generated text or null>}   it did not

plus "tries" and "retried" (re-asked records), "chunks", "conflicts" and "chunk_errors" (chunked documents).
docs/EXTRACTION.md describes every key.

Pieces: inputs.py (JSONL / CSV / text files -> Documents), preflight.py (checks before the model loads),
output.py (the append-only result file, resume), job.py (the program and its concurrent runs), api.py (the job:
checks before generation, chunks, spans; the Python API), spans.py, chunking.py, progress.py, summary.py,
cli.py (options and the order of it all); evaluation.py + eval_cli.py (`sglite eval`), review.py
(`sglite view`), batch.py (`sglite batch`)."""
from __future__ import annotations

from .api import Extraction, extract
from .cli import main
from .setup_error import SetupError

__all__ = ["main", "extract", "Extraction", "SetupError"]
