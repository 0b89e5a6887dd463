"""Progress: a bar on stderr that moves from the first second of a job.

Until the prompts are prefilled (or a document finishes first) it counts prefill tokens, read from the
engine's own counters (`prefill_tokens_computed` in get_stats, in process or through a server's
/get_server_info) against the prompts' token count; from then on it counts documents, with docs/s and the ETA
(tqdm's) and the output tokens so far and per second since the start (the engine's decode counter). Without
engine counters (a backend that has none) it counts documents only. The two phases are one-way: once the bar
counts documents it never shows tokens again (a counter read that fails for a tick changes nothing). A document
that ends without generating (refused by the engine) leaves the prefill total, since its tokens will never be
prefilled. Its own thread reads the counters twice a second and redraws as often on a terminal, every 30 s into
a log; the job's thread only calls `doc_done`."""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from .inputs import Document, id_key

COUNT_CHUNK = 256   # documents tokenized per tick while the prompt total is being counted
TICK_S = 0.5        # how often the counters are read (the bar redraws at most every interval_s)


class Progress:
    def __init__(self, backend: Any, spec: Any, docs: list[Document], prefix: str, file: TextIO | None = None,
                 interval_s: float | None = None):
        self.backend, self.spec, self.docs, self.prefix = backend, spec, docs, prefix
        self.file = file or sys.stderr
        # a log file gets a line every 30 s rather than a redraw every half second
        self.interval_s = interval_s or (TICK_S if self.file.isatty() else 30.0)
        self.done = 0              # written only by the job's thread
        self.generated = 0         # of which generated (the engine prefilled their prompts)
        self._dropped: list[Any] = []   # ids of documents done without generating (appended by the job's thread)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sglite-extract-progress", daemon=True)

    def start(self) -> "Progress":
        self._thread.start()
        return self

    def doc_done(self, doc_id: Any = None, generated: bool = True) -> None:
        """One document finished; `generated` False: it ended before any generation (its prompt never ran)."""
        self.done += 1
        if generated:
            self.generated += 1
        else:
            self._dropped.append(doc_id)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    # --- the progress thread ----------------------------------------------------------------------------------
    def _counters(self) -> tuple[int, int] | None:
        """(prefill tokens computed, decode tokens) since the engine started, or None without such counters."""
        try:
            info = self.backend.get_server_info()
        except Exception:   # noqa: BLE001 - progress is best effort; the job reports real errors
            return None
        stats = info.get("stats", info) if isinstance(info, dict) else {}
        prefill, decode = stats.get("prefill_tokens_computed"), stats.get("decode_tokens")
        return (prefill, decode) if isinstance(prefill, int) and isinstance(decode, int) else None

    def _prompt_tokens(self):
        """Counts the prompt tokens to prefill, a chunk of documents per next(): yields None until the last chunk,
        then the total: the shared prefix once plus, per document, its text and the template's tokens around it
        (measured on the first document)."""
        from ..lang.tracer import TracingBackend, run_untimed
        from .job import extract_program

        tokenize = self.backend.tokenize
        self._per_doc = 0
        first = run_untimed(extract_program.func, (), self.spec.call(self.docs[0]),
                            TracingBackend(self.backend.chat_template(), stop_at_first_call=True)).text
        prefix_tokens = len(tokenize(self.prefix)) if self.prefix else 0
        per_doc = self._per_doc = max(0, len(tokenize(first)) - prefix_tokens - len(tokenize(self.docs[0].text)))
        total = prefix_tokens
        for i in range(0, len(self.docs), COUNT_CHUNK):
            total += sum(len(tokenize(d.text)) + per_doc for d in self.docs[i:i + COUNT_CHUNK])
            yield total if i + COUNT_CHUNK >= len(self.docs) else None

    def _dropped_tokens(self, seen: int) -> int:
        """Prompt tokens of the documents dropped since the first `seen` of them."""
        texts = {id_key(d.id): d.text for d in self.docs}
        tokens = 0
        for doc_id in self._dropped[seen:]:
            text = texts.get(id_key(doc_id))
            if text is not None:
                tokens += len(self.backend.tokenize(text)) + self._per_doc
        return tokens

    def _run(self) -> None:
        from tqdm import tqdm

        style = dict(file=self.file, dynamic_ncols=True, mininterval=self.interval_s)
        start = self._counters()
        totals = self._prompt_tokens() if start is not None else iter(())
        bar = None
        phase = "prefill" if start is not None else "documents"
        total, dropped, seen = None, 0, 0
        t0 = time.perf_counter()
        while True:
            stopping = self._stop.wait(TICK_S)
            now = self._counters() if start is not None else None
            if phase == "prefill":
                if bar is None:
                    bar = tqdm(desc="prefill", unit="tok", unit_scale=True, **style)
                if total is None:
                    try:
                        total = next(totals, None)
                    except Exception:   # noqa: BLE001 - no tokenizer here (a server's we cannot load): no total
                        totals = iter(())
                if total is not None and seen < len(self._dropped):
                    try:
                        dropped += self._dropped_tokens(seen)
                    except Exception:   # noqa: BLE001 - best effort, as above
                        pass
                    seen = len(self._dropped)
                if total is not None:
                    bar.total = max(0, total - dropped)
                if now is not None:
                    bar.update(now[0] - start[0] - bar.n)
                prefilled = bar.total is not None and bar.n >= bar.total
                if not (stopping or self.generated or prefilled or self.done == len(self.docs)):
                    continue
                bar.close()
                bar, phase = None, "documents"
            if bar is None:
                bar = tqdm(total=len(self.docs), initial=self.done, desc="extract", unit="doc", **style)
            if now is not None:
                out_tokens = now[1] - start[1]
                bar.set_postfix_str(f"{out_tokens} tokens out, {out_tokens / (time.perf_counter() - t0):.1f} tok/s",
                                    refresh=False)
            bar.update(self.done - bar.n)
            if stopping:
                bar.close()
                return
