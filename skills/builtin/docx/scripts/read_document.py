"""Print a .docx as Markdown: python3 read_document.py IN.docx"""

import sys

from docx import Document


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    document = Document(sys.argv[1])
    body = document.element.body
    paragraphs = {paragraph._p: paragraph for paragraph in document.paragraphs}
    tables = {table._tbl: table for table in document.tables}
    for child in body.iterchildren():
        if child in paragraphs:
            paragraph = paragraphs[child]
            style = paragraph.style.name if paragraph.style is not None else ""
            text = paragraph.text
            if style.startswith("Heading") and style[-1:].isdigit():
                print("#" * int(style[-1]) + " " + text)
            elif style == "Title":
                print("# " + text)
            elif style.startswith("List Bullet"):
                print("- " + text)
            elif style.startswith("List Number"):
                print("1. " + text)
            elif text.strip():
                print(text)
        elif child in tables:
            for number, row in enumerate(tables[child].rows):
                print("| " + " | ".join(cell.text for cell in row.cells) + " |")
                if number == 0:
                    print("|" + "---|" * len(row.cells))


if __name__ == "__main__":
    main()
