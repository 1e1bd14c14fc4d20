"""Merge PDFs, or pick pages: python3 merge_pdfs.py OUT.pdf IN.pdf[:PAGES] ..."""

import sys

from pages import page_indexes
from pypdf import PdfReader, PdfWriter


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    writer = PdfWriter()
    for argument in sys.argv[2:]:
        path, _, pages = argument.partition(":") if not argument.endswith(".pdf") else (argument, "", "")
        reader = PdfReader(path)
        for index in page_indexes(pages or None, len(reader.pages)):
            writer.add_page(reader.pages[index])
    with open(sys.argv[1], "wb") as out:
        writer.write(out)
    print(f"wrote {sys.argv[1]}: {len(writer.pages)} pages")


if __name__ == "__main__":
    main()
