"""``report.md``: the document as Markdown (the plots are in ``report.html``)."""

from __future__ import annotations

from harness.report.document import Heading, Paragraph, Plot, Table, build_document
from harness.report.model import Report
from harness.text import one_line

CELL_CHARS = 400


def cell(text: str) -> str:
    """One table cell: one inert line, its pipes escaped (record text may hold anything)."""
    return one_line(text, CELL_CHARS).replace("|", "\\|") or " "


def render_markdown(report: Report) -> str:
    doc = build_document(report)
    lines = [f"# {doc.title}", ""]
    for block in doc.blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + one_line(block.text, CELL_CHARS), ""]
        elif isinstance(block, Paragraph):
            lines += [one_line(block.text, 4000), ""]
        elif isinstance(block, Table) and not block.rows:
            lines += ["*(none yet)*", ""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(cell(c) for c in block.columns) + " |")
            lines.append("| " + " | ".join("---" for _ in block.columns) + " |")
            lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        elif isinstance(block, Plot):
            lines += [f"*Plot in report.html: {block.caption}*", ""]
    return "\n".join(lines)
