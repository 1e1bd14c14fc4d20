"""Write an .xlsx workbook from a JSON spec: python3 make_workbook.py SPEC.json|- OUT.xlsx"""

import json
import sys
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import Font
from openpyxl.utils import column_index_from_string, get_column_letter


def columns(span: str) -> range:
    first, _, last = span.partition(":")
    return range(column_index_from_string(first), column_index_from_string(last or first) + 1)


def build(spec: dict) -> Workbook:
    book = Workbook()
    book.remove(book.active)
    for index, sheet_spec in enumerate(spec.get("sheets") or [{"rows": []}]):
        sheet = book.create_sheet(str(sheet_spec.get("name") or f"Sheet{index + 1}")[:31])
        for row in sheet_spec.get("rows") or []:
            sheet.append(list(row))
        if sheet_spec.get("header") and sheet.max_row:
            for cell in sheet[1]:
                cell.font = Font(bold=True)
            sheet.freeze_panes = "A2"
        for letter, width in (sheet_spec.get("widths") or {}).items():
            sheet.column_dimensions[letter].width = float(width)
        for span, number_format in (sheet_spec.get("number_format") or {}).items():
            for column in columns(span):
                for (cell,) in sheet.iter_rows(min_col=column, max_col=column, min_row=2):
                    cell.number_format = number_format
        if not sheet_spec.get("widths"):
            for column in range(1, sheet.max_column + 1):
                longest = max(
                    (len(str(c.value)) for (c,) in sheet.iter_rows(min_col=column, max_col=column)), default=8
                )
                sheet.column_dimensions[get_column_letter(column)].width = min(60, max(8, longest + 2))
    return book


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spec = json.loads(sys.stdin.read() if sys.argv[1] == "-" else Path(sys.argv[1]).read_text(encoding="utf-8"))
    build(spec).save(sys.argv[2])
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
