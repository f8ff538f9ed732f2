"""``report.html``: the document as one self-contained page. The plots are SVG inside ``data:``
URIs, the style is inline, and a content security policy forbids loading anything else, so
the page reads the same offline and fetches nothing."""

from __future__ import annotations

import base64
import html

from harness.report.document import Heading, Paragraph, Plot, Table, build_document
from harness.report.model import Report
from harness.report.plots import PLOTS
from harness.text import inert_block

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr.money td { background: #fffbe6; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
code { font-size: 0.9em; }
"""
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def text(value: str) -> str:
    """Record text as HTML: escaped, every unsafe character shown as its escape; `code` and
    **bold** spans kept (the document's own words use them)."""
    escaped = html.escape(inert_block(value))
    parts = escaped.split("`")
    out = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    bold = out.split("**")
    return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(bold))


def render_html(report: Report) -> str:
    doc = build_document(report)
    body: list[str] = [f"<h1>{text(doc.title)}</h1>"]
    for block in doc.blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{text(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{text(block.text)}</p>")
        elif isinstance(block, Table) and not block.rows:
            body.append("<p><em>(none yet)</em></p>")
        elif isinstance(block, Table):
            row_class = ' class="money"' if block.money else ""
            head = "".join(f"<th>{html.escape(c)}</th>" for c in block.columns)
            rows = "".join(f"<tr{row_class}>" + "".join(
                f"<td>{html.escape(inert_block(c))}</td>" for c in row) + "</tr>"
                for row in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Plot):
            svg = PLOTS[block.name](report)
            data = base64.b64encode(svg.encode()).decode()
            body.append(f'<figure id="plot-{block.name}" class="plot"><img alt="'
                        f'{html.escape(block.caption)}" src="data:image/svg+xml;base64,{data}">'
                        f"<figcaption>{html.escape(block.caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
            f"<title>{html.escape(doc.title)}</title><style>{STYLE}</style></head>"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")
