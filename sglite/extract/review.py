"""`sglite view OUTPUT --input DOCS -o review.html [--gold GOLD]`: one self-contained HTML file to look through
an extraction's results: no network access, no CDN, no external file (the data is a JSON block in the page, the
style and script are inline).

The page: the per-field table (nulls, values not found in their document, and with --gold the evaluation's
accuracy, misses and inventions); filters (error lines, records with a value not found, records with a null);
the list of documents; and the selected document's fields beside its text, each value's span highlighted
(select a field and the text scrolls to it). Where the output carries field confidence (confidence.py), each
value shows it, coloured (red under 0.5, amber under 0.8), a record's fields are listed least confident first,
the document list is sorted by each record's count of doubtful values (under 0.5), most first, then by its least
confident value (a checkbox turns the sorting off), and the field table counts each field's doubtful values:
the doubtful ones come to the reader first. Free text (a long generated string) is doubtful by nature, since its
confidence is the probability of that exact text. Documents are
drawn one at a time by the script, so the page's size grows with the text and records only."""
from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path
from typing import Any

from .confidence import BUCKETS
from .setup_error import SetupError
from .evaluation import evaluate, load_lines, parse_rule
from .inputs import Document, id_key, load_documents
from .spans import find_spans, not_found_fields, scalars
from .summary import Summary


def page_data(lines: list[dict[str, Any]], docs: dict[str, Document], gold: dict[str, dict] | None = None,
              rules: dict | None = None) -> dict[str, Any]:
    """What the page shows, as JSON: one entry per output line (its document's text, the record, the spans
    (found here for lines written with --no-spans), flags for the filters, gold values) and the field table."""
    fields = list(dict.fromkeys(k for line in lines if isinstance(line.get("record"), dict) for k in line["record"]))
    summary = Summary({"properties": dict.fromkeys(fields, {})})
    entries = []
    for line in lines:
        doc = docs.get(id_key(line.get("id")))
        text = doc.text if doc is not None else ""
        record = line.get("record")
        spans = line.get("spans")
        if isinstance(record, dict) and not isinstance(spans, dict) and doc is not None:
            spans = line["spans"] = find_spans(record, text)
        summary.add(line)
        confidence = line.get("confidence") if isinstance(line.get("confidence"), dict) else {}
        values = [{"ptr": p, "value": v} for p, v in scalars(record)] if isinstance(record, dict) else []
        for v in values:
            if v["ptr"] in confidence:
                v["conf"] = confidence[v["ptr"]]
        for k in (record if isinstance(record, dict) else {}):
            if record[k] is None and f"/{k}" in confidence:
                values.append({"ptr": f"/{k}", "value": None, "conf": confidence[f"/{k}"]})
        values.sort(key=lambda v: v.get("conf", 2.0))    # least confident first; unscored last, in order
        entry = {"id": line.get("id"), "text": text, "record": record, "spans": spans or {}, "values": values,
                 "error": line.get("error"), "raw": line.get("raw") if record is None else None,
                 "missing_text": doc is None,
                 "not_found": not_found_fields(spans) if isinstance(spans, dict) else [],
                 "nulls": [k for k, v in record.items() if v is None and f"/{k}" not in confidence]
                 if isinstance(record, dict) else [],
                 "low": min(confidence.values(), default=None),
                 "doubtful": sum(p < BUCKETS[0] for p in confidence.values()),
                 "extra": {k: line[k] for k in ("tries", "retried", "chunks", "conflicts") if k in line}}
        if gold is not None:
            entry["gold"] = gold.get(id_key(line.get("id")))
        entries.append(entry)
    doubtful = dict.fromkeys(fields, 0)
    for line in lines:
        conf = line.get("confidence") if isinstance(line.get("confidence"), dict) else {}
        for ptr, p in conf.items():
            top = ptr.split("/")[1].replace("~1", "/").replace("~0", "~") if ptr.count("/") else ""
            if top in doubtful and isinstance(p, (int, float)) and p < BUCKETS[0]:
                doubtful[top] += 1
    table = [{"field": f, "null": summary.null[f], "not_found": summary.not_found[f], "doubtful": doubtful[f]}
             for f in fields]
    data: dict[str, Any] = {"docs": entries, "table": table, "valid": summary.valid, "lines": summary.lines,
                            "has_confidence": any(e["low"] is not None for e in entries),
                            "bounds": list(BUCKETS[:2])}
    if gold is not None:
        ev = evaluate({id_key(x.get("id")): x for x in lines}, gold, [f for f in fields if any(
            f in g for g in gold.values())], rules)
        for row in table:
            s = ev.fields.get(row["field"])
            if s is not None:
                row.update(right=s.right, scored=s.scored, misses=s.misses, inventions=s.inventions)
        data["total"] = {"right": ev.total.right, "scored": ev.total.scored}
    return data


def render(data: dict[str, Any], title: str = "sglite review") -> str:
    """The page: PAGE with the data as a JSON block (`</` escaped so no text can close the script element)."""
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", blob)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglite view", description="write a self-contained HTML page to review an "
                                 "sglite extract output beside its documents")
    ap.add_argument("output", type=Path, metavar="OUTPUT", help="the sglite extract output (JSONL)")
    ap.add_argument("--input", nargs="+", required=True, metavar="PATH", help="the documents, as given to extract")
    ap.add_argument("-o", "--html", type=Path, required=True, help="the page to write (e.g. review.html)")
    ap.add_argument("--gold", type=Path, default=None, help="gold values (JSONL), to show the evaluation")
    ap.add_argument("--rule", action="append", default=[], metavar="FIELD=RULE", help="as in sglite eval")
    ap.add_argument("--text-field", "--text-column", dest="text_field", default="text")
    ap.add_argument("--id-field", "--id-column", dest="id_field", default="id")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        lines = list(load_lines(args.output).values())
        docs = {id_key(d.id): d for d in load_documents(args.input, args.text_field, args.id_field)}
        gold = load_lines(args.gold) if args.gold else None
        rules = {name: parse_rule(rule) for name, _, rule in (r.partition("=") for r in args.rule)}
    except (SetupError, ValueError, OSError) as e:
        print(f"sglite view: {e}", file=sys.stderr)
        return 2
    data = page_data(lines, docs, gold, rules)
    missing = sum(e["missing_text"] for e in data["docs"])
    page = render(data, f"sglite review: {args.output.name}")
    try:
        args.html.write_text(page, encoding="utf-8")
    except OSError as e:
        print(f"sglite view: cannot write {args.html} ({e.strerror or e})", file=sys.stderr)
        return 3
    print(f"wrote {args.html} ({len(page.encode()) / 1e6:.2f} MB, {len(lines)} documents"
          + (f"; {missing} ids not in --input, shown without text" if missing else "") + ")")
    return 0


PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>__TITLE__</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222}
header{padding:8px 14px;background:#f3f4f6;border-bottom:1px solid #ddd}
h1{font-size:16px;margin:0 0 6px}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #e5e5e5;text-align:left}
th{font-weight:600}.num{text-align:right}
#main{display:flex;height:calc(100vh - 0px)}
#list{width:220px;overflow:auto;border-right:1px solid #ddd;padding:6px}
#list div{padding:2px 6px;cursor:pointer;border-radius:3px}#list div.sel{background:#dbeafe}
#list .err{color:#b91c1c}#list .nf{color:#b45309}
#doc{flex:1;display:flex;overflow:hidden}
#fields{width:460px;overflow:auto;padding:8px;border-right:1px solid #ddd}
#fields tr{cursor:pointer}#fields tr.sel{background:#fef3c7}#fields td{max-width:240px;overflow-wrap:anywhere}#fields td:first-child,#fields td:nth-child(3){white-space:nowrap}
#text{flex:1;overflow:auto;padding:10px 14px;white-space:pre-wrap}
mark{background:#bbf7d0;border-radius:2px}mark.normalized{background:#bfdbfe}mark.fuzzy{background:#fde68a}
mark.cur{outline:2px solid #f59e0b}
.m-not_found{color:#b91c1c;font-weight:600}.m-exact{color:#15803d}.m-normalized{color:#1d4ed8}.m-fuzzy{color:#a16207}
.bad{color:#b91c1c}.good{color:#15803d}.note{color:#666;font-size:12px}
.c-low{background:#fecaca}.c-mid{background:#fde68a}.c-high{background:#dcfce7}
</style></head><body>
<header><h1>__TITLE__</h1><div id="totals"></div>
<details open><summary>per field</summary><table id="table"></table></details>
<div>show: <label><input type="checkbox" id="f-err"> error lines</label>
<label><input type="checkbox" id="f-nf"> a value not found</label>
<label><input type="checkbox" id="f-null"> a null</label>
<label id="sort-box"><input type="checkbox" id="f-sort" checked> most doubtful first</label>
<span id="count" class="note"></span></div>
</header>
<div id="main"><div id="list"></div><div id="doc"><div id="fields"></div><div id="text"></div></div></div>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = id => document.getElementById(id);
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
let current = -1;

function drawTable() {
  const g = D.total !== undefined;
  const c = D.has_confidence;
  let h = "<tr><th>field</th><th class=num>null</th><th class=num>not found</th>" +
          (c ? `<th class=num title="values under ${D.bounds[0]} confidence">doubtful</th>` : "") +
          (g ? "<th class=num>accuracy</th><th class=num>misses</th><th class=num>inventions</th>" : "") + "</tr>";
  for (const r of D.table) {
    h += `<tr><td>${esc(r.field)}</td><td class=num>${r.null}</td><td class=num>${r.not_found}</td>` +
      (c ? `<td class=num>${r.doubtful}</td>` : "") +
      (g ? (r.scored !== undefined ? `<td class=num>${r.right}/${r.scored}</td><td class=num>${r.misses}</td>` +
           `<td class=num>${r.inventions}</td>` : "<td></td><td></td><td></td>") : "") + "</tr>";
  }
  $("table").innerHTML = h;
  $("totals").textContent = `${D.valid}/${D.lines} records validated` +
    (D.total ? `; ${D.total.right}/${D.total.scored} gold values right` : "");
}

function shown() {
  const e = $("f-err").checked, n = $("f-nf").checked, z = $("f-null").checked;
  const idx = D.docs.map((d, i) => i).filter(i => {
    const d = D.docs[i];
    if (!e && !n && !z) return true;
    return (e && d.error) || (n && d.not_found.length) || (z && (d.nulls.length ||
      d.values.some(v => v.value === null)));
  });
  // most doubtful values first, then the least confident; records without confidence after, in file order
  const key = i => D.docs[i].low === null ? [-1, 2] : [D.docs[i].doubtful, D.docs[i].low];
  if (D.has_confidence && $("f-sort").checked)
    idx.sort((a, b) => key(b)[0] - key(a)[0] || key(a)[1] - key(b)[1] || a - b);
  return idx;
}

const confClass = p => p < D.bounds[0] ? "c-low" : p < D.bounds[1] ? "c-mid" : "c-high";

function drawList() {
  const idx = shown();
  $("count").textContent = `${idx.length} of ${D.docs.length} documents`;
  $("list").innerHTML = idx.map(i => {
    const d = D.docs[i], cls = d.error ? "err" : d.not_found.length ? "nf" : "";
    const low = d.low !== null && d.low !== undefined ?
      ` <span class="${confClass(d.low)}" title="doubtful values (under ${D.bounds[0]}); the lowest confidence ${d.low.toFixed(2)}">${d.doubtful} doubtful</span>` : "";
    return `<div data-i="${i}" class="${cls}${i === current ? " sel" : ""}">${esc(d.id)}${low}` +
      (d.error ? " (error)" : d.not_found.length ? ` (${d.not_found.length} not found)` : "") + "</div>";
  }).join("");
  if (idx.length && !idx.includes(current)) select(idx[0]);
}

function highlighted(d) {
  const spans = Object.entries(d.spans).filter(([p, s]) => s.start !== null)
    .sort((a, b) => a[1].start - b[1].start || b[1].end - a[1].end);
  let out = "", at = 0;
  for (const [p, s] of spans) {
    if (s.start < at) continue;   // inside an earlier highlight: its field still scrolls there
    out += esc(d.text.slice(at, s.start)) +
      `<mark class="${s.match}" data-ptr="${esc(p)}" title="${esc(p)} (${s.match})">` +
      esc(d.text.slice(s.start, s.end)) + "</mark>";
    at = s.end;
  }
  return out + esc(d.text.slice(at));
}

function select(i) {
  current = i;
  const d = D.docs[i];
  for (const el of document.querySelectorAll("#list div")) el.classList.toggle("sel", +el.dataset.i === i);
  let h = `<div><b>${esc(d.id)}</b></div>`;
  if (d.error) h += `<p class=bad>${esc(d.error)}</p>` + (d.raw ? `<pre>${esc(typeof d.raw === "string" ? d.raw : JSON.stringify(d.raw))}</pre>` : "");
  if (Object.keys(d.extra).length) h += `<p class=note>${esc(JSON.stringify(d.extra))}</p>`;
  const c = D.has_confidence;
  h += "<table><tr><th>field</th><th>value</th><th>match</th>" + (c ? "<th>confidence</th>" : "") +
       (d.gold ? "<th>gold</th>" : "") + "</tr>";
  for (const {ptr, value, conf} of d.values) {
    const s = d.spans[ptr] || {match: ""};
    let gold = "";
    if (d.gold) {
      const top = ptr.split("/")[1];
      gold = top in d.gold ? `<td>${esc(JSON.stringify(d.gold[top]))}</td>` : "<td></td>";
    }
    h += `<tr data-ptr="${esc(ptr)}"><td>${esc(ptr)}</td><td>${esc(JSON.stringify(value))}</td>` +
         `<td class="m-${s.match}">${s.match}</td>` +
         (c ? (conf !== undefined ? `<td class="num ${confClass(conf)}">${conf.toFixed(2)}</td>` : "<td></td>") : "") +
         `${gold}</tr>`;
  }
  if (d.record) for (const k of d.nulls) h += `<tr><td>/${esc(k)}</td><td>null</td><td></td>${c ? "<td></td>" : ""}${d.gold ? "<td>" + esc(JSON.stringify(d.gold[k])) + "</td>" : ""}</tr>`;
  $("fields").innerHTML = h + "</table>";
  $("text").innerHTML = d.missing_text ? "<p class=note>(this id is not in the documents given)</p>" : highlighted(d);
}

function focus(ptr) {
  for (const el of document.querySelectorAll("#fields tr")) el.classList.toggle("sel", el.dataset.ptr === ptr);
  for (const m of document.querySelectorAll("mark")) m.classList.remove("cur");
  let mark = null;
  for (const m of document.querySelectorAll("mark")) if (m.dataset.ptr === ptr) mark = m;
  const s = D.docs[current].spans[ptr];
  if (!mark && s && s.start !== null) {   // covered by another value's highlight: scroll to that one
    for (const m of document.querySelectorAll("mark")) {
      const o = D.docs[current].spans[m.dataset.ptr];
      if (o.start <= s.start && s.end <= o.end) mark = m;
    }
  }
  if (mark) { mark.classList.add("cur"); mark.scrollIntoView({block: "center"}); }
}

$("list").addEventListener("click", e => { const t = e.target.closest("div[data-i]"); if (t) select(+t.dataset.i); });
$("fields").addEventListener("click", e => { const t = e.target.closest("tr[data-ptr]"); if (t) focus(t.dataset.ptr); });
for (const id of ["f-err", "f-nf", "f-null", "f-sort"]) $(id).addEventListener("change", drawList);
if (!D.has_confidence) $("sort-box").style.display = "none";
drawTable();
drawList();
</script></body></html>
"""
