"""Write a .docx from Markdown: python3 make_document.py IN.md|- OUT.docx"""

import re
import sys
from pathlib import Path

from docx import Document

INLINE = re.compile(r"(\*\*[^*]+\*\*|\*[^*]+\*)")


def add_text(paragraph, text: str) -> None:
    for part in INLINE.split(text):
        if part.startswith("**") and part.endswith("**") and len(part) > 4:
            paragraph.add_run(part[2:-2]).bold = True
        elif part.startswith("*") and part.endswith("*") and len(part) > 2:
            paragraph.add_run(part[1:-1]).italic = True
        elif part:
            paragraph.add_run(part)


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def build(markdown: str) -> Document:
    document = Document()
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if not line.strip():
            continue
        if heading := re.match(r"^(#{1,3})\s+(.*)$", line):
            document.add_heading(heading.group(2), level=len(heading.group(1)))
        elif line.startswith(("- ", "* ")):
            add_text(document.add_paragraph(style="List Bullet"), line[2:])
        elif numbered := re.match(r"^\d+[.)]\s+(.*)$", line):
            add_text(document.add_paragraph(style="List Number"), numbered.group(1))
        elif line.lstrip().startswith("|"):
            rows = [cells(line)]
            while index < len(lines) and lines[index].lstrip().startswith("|"):
                if not re.match(r"^\s*\|?\s*:?-{3,}", lines[index]):
                    rows.append(cells(lines[index]))
                index += 1
            table = document.add_table(rows=len(rows), cols=max(len(row) for row in rows))
            table.style = "Table Grid"
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
                    if r == 0:
                        for run in table.cell(r, c).paragraphs[0].runs:
                            run.bold = True
        else:
            add_text(document.add_paragraph(), line)
    return document


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    markdown = sys.stdin.read() if sys.argv[1] == "-" else Path(sys.argv[1]).read_text(encoding="utf-8")
    build(markdown).save(sys.argv[2])
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
