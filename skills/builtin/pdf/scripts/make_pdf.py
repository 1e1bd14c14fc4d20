"""Write a PDF from Markdown: python3 make_pdf.py IN.md|- OUT.pdf"""

import html
import re
import sys
from pathlib import Path

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import ListFlowable, ListItem, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle


def inline(text: str) -> str:
    text = html.escape(text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    return re.sub(r"\*([^*]+)\*", r"<i>\1</i>", text)


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def build(markdown: str) -> list:
    styles = getSampleStyleSheet()
    story, bullets = [], []
    lines = markdown.splitlines()
    index = 0

    def flush() -> None:
        if bullets:
            story.append(
                ListFlowable([ListItem(Paragraph(b, styles["BodyText"])) for b in bullets], bulletType="bullet")
            )
            bullets.clear()

    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if line.startswith(("- ", "* ")):
            bullets.append(inline(line[2:]))
            continue
        flush()
        if not line.strip():
            continue
        if heading := re.match(r"^(#{1,3})\s+(.*)$", line):
            story.append(Paragraph(inline(heading.group(2)), styles[f"Heading{len(heading.group(1))}"]))
        elif line.lstrip().startswith("|"):
            rows = [cells(line)]
            while index < len(lines) and lines[index].lstrip().startswith("|"):
                if not re.match(r"^\s*\|?\s*:?-{3,}", lines[index]):
                    rows.append(cells(lines[index]))
                index += 1
            table = Table(rows)
            table.setStyle(
                TableStyle(
                    [("GRID", (0, 0), (-1, -1), 0.5, colors.grey), ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold")]
                )
            )
            story += [table, Spacer(1, 8)]
        else:
            story.append(Paragraph(inline(line), styles["BodyText"]))
    flush()
    return story


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    markdown = sys.stdin.read() if sys.argv[1] == "-" else Path(sys.argv[1]).read_text(encoding="utf-8")
    SimpleDocTemplate(sys.argv[2], pagesize=A4).build(build(markdown) or [Spacer(1, 1)])
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
