"""The `sglite` command: `sglite serve ...` (HTTP server), `sglite extract ...` (batch JSON extraction) and the
tools around it: `eval`, `view`, `batch`."""
from __future__ import annotations

import sys

USAGE = """usage: sglite <command> [options]

commands:
  serve     run the HTTP server (OpenAI-compatible API and native /generate)
  extract   run a JSON-schema extraction over documents (JSONL, CSV, text files), resumable
  eval      score an extraction output against gold values, or compare two outputs (sign test)
  view      write a self-contained HTML review page of an extraction output and its documents
  batch     run an OpenAI batch file (/v1/chat/completions, /v1/completions lines), resumable
run `sglite <command> --help` for the options of each."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "serve":
        from .server.launch import main as serve_main
        return serve_main(rest)
    if command == "extract":
        from .extract import main as extract_main
        return extract_main(rest)
    if command == "eval":
        from .extract.eval_cli import main as eval_main
        return eval_main(rest)
    if command == "view":
        from .extract.review import main as view_main
        return view_main(rest)
    if command == "batch":
        from .extract.batch import main as batch_main
        return batch_main(rest)
    print(f"sglite: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
