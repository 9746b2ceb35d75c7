"""`posttrain report RUN_DIR ... --html out.html`: one self-contained page (no network, no files beside it).

The page holds the telemetry plot as an inline PNG (``data:`` URI), the health section, the speed
table and every per-metric table, rendered from the same markdown `posttrain report` prints. A
small inline script marks each plot as loaded (``data-loaded``) and records script errors in
``#errors``, so a headless browser can check that the page really rendered
(tests/evaluation/test_html_report.py does, with Chromium).
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.flag { color: #a40000; font-weight: 600; }
.ok { color: #1a7f37; }
img { max-width: 100%; border: 1px solid #ddd; }
"""

_SCRIPT = """
window.addEventListener('error', function (e) {
  var box = document.getElementById('errors');
  box.textContent += (e.message || 'error') + '\\n';
});
window.addEventListener('load', function () {
  document.querySelectorAll('img.plot').forEach(function (img) {
    img.setAttribute('data-loaded', img.complete && img.naturalWidth > 0 ? 'yes' : 'no');
  });
  document.body.setAttribute('data-ready', 'yes');
});
"""


def _inline(text: str) -> str:
    """Escape, then `code` and **bold** (the only inline markdown the tables use)."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def markdown_to_html(markdown: str) -> str:
    """The small markdown subset posttrain writes: headings, tables, bullet lists, paragraphs."""
    parts: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = min(6, len(line) - len(line.lstrip("#")))
            parts.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            header, body = rows[0], [r for r in rows[1:] if not all(set(c) <= set("-:") for c in r)]
            parts.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in header) + "</tr>"
                         + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body) + "</table>")
            continue
        elif line.lstrip().startswith("- "):
            items = []
            while i < len(lines) and lines[i].lstrip().startswith("- "):
                text = lines[i].lstrip()[2:]
                css = ' class="flag"' if re.match(r"[a-z_]+ \((steps?) ", text) else ""
                items.append(f"<li{css}>{_inline(text)}</li>")
                i += 1
            parts.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            css = ' class="ok"' if "no flag raised" in line else ""
            parts.append(f"<p{css}>{_inline(line)}</p>")
        i += 1
    return "\n".join(parts)


def write_html(path: Path, markdown: str, plots: list[Path], title: str = "posttrain report") -> None:
    """Write the page: the plots (inline PNG) first, then the report's markdown as HTML."""
    images = []
    for plot in plots:
        data = base64.b64encode(Path(plot).read_bytes()).decode("ascii")
        images.append(f'<img class="plot" alt="{html.escape(Path(plot).name)}" src="data:image/png;base64,{data}">')
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>\n"
            f"<h1>{html.escape(title)}</h1>\n{''.join(images)}\n{markdown_to_html(markdown)}\n"
            "<pre id=\"errors\" hidden></pre>\n</body></html>\n")
    Path(path).write_text(page, encoding="utf-8")
