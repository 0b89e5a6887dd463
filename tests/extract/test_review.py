"""`sglite view`: the page is one self-contained file (no URL to fetch), small for 100 documents, and in a real
browser (headless Chromium, skipped where none is installed) it draws each found value's span as a highlight."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sglite.cli import main as sglite_main
from sglite.extract.spans import find_spans

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _job(tmp_path: Path) -> tuple[Path, Path, list[dict]]:
    """The 100 bundled reports as documents, and an output holding their gold values (one error line, one
    invented revenue) written without spans, so the page finds them."""
    docs = [json.loads(x) for name in ("reports", "synthetic_reports")
            for x in open(DATA / f"{name}.jsonl", encoding="utf-8")]
    gold = [json.loads(x) for name in ("reports", "synthetic_reports")
            for x in open(DATA / f"{name}_gold.jsonl", encoding="utf-8")]
    lines = []
    for g in gold:
        record = {k: v for k, v in g.items() if k not in ("id", "note")}
        if g["id"] == "r02":
            record["revenue"] = 999.25
        lines.append({"id": g["id"], "record": record} if g["id"] != "r03" else
                     {"id": "r03", "record": None, "error": "schema: </script><b>x", "raw": "{"})
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps(g, ensure_ascii=False) + "\n" for g in gold))
    return tmp_path / "out.jsonl", tmp_path / "docs.jsonl", lines


def test_page_is_self_contained_and_small(tmp_path, capsys):
    out, docs, lines = _job(tmp_path)
    page = tmp_path / "review.html"
    assert sglite_main(["view", str(out), "--input", str(docs), "-o", str(page), "--gold",
                        str(tmp_path / "gold.jsonl")]) == 0
    html = page.read_text(encoding="utf-8")
    assert len(lines) == 100 and len(html.encode()) < 2_000_000
    assert not re.search(r"""(src|href)\s*=|@import|url\(|fetch\(|XMLHttpRequest""", html)
    assert "default-src 'none'" in html               # and the browser is told to fetch nothing
    assert "</script><b>" not in html                  # text from the output cannot end the data block
    assert "100 documents" in capsys.readouterr().out


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (Debian: apt-get install -y chromium)")
def test_headless_chromium_draws_the_highlights(tmp_path):
    out, docs, lines = _job(tmp_path)
    page = tmp_path / "review.html"
    assert sglite_main(["view", str(out), "--input", str(docs), "-o", str(page)]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]
    dom = subprocess.run([BROWSER, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    marks = re.findall(r'<mark class="(\w+)" data-ptr="([^"]+)"[^>]*>([^<]*)</mark>', dom)
    first = json.loads(docs.read_text(encoding="utf-8").splitlines()[0])
    spans = find_spans(lines[0]["record"], first["text"])
    want = {p: first["text"][s["start"]:s["end"]] for p, s in spans.items() if s["start"] is not None}
    assert {p: text for _, p, text in marks} == want and len(want) == 7   # every value of r01, highlighted
    assert "r03 (error)" in dom and "r02 (1 not found)" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([BROWSER, *flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
