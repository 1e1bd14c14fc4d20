"""Print a PDF's text page by page: python3 read_pdf.py IN.pdf [--pages 1-3,5]"""

import argparse

from pages import page_indexes
from pypdf import PdfReader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--pages")
    args = parser.parse_args()
    reader = PdfReader(args.path)
    for index in page_indexes(args.pages, len(reader.pages)):
        print(f"--- page {index + 1} of {len(reader.pages)} ---")
        print((reader.pages[index].extract_text() or "").strip())


if __name__ == "__main__":
    main()
