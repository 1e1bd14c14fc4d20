"""Print a workbook's cells: python3 read_workbook.py IN.xlsx [--sheet NAME] [--json] [--values]"""

import argparse
import csv
import json
import sys

from openpyxl import load_workbook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--sheet")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--values", action="store_true", help="cached values instead of formulas")
    args = parser.parse_args()
    book = load_workbook(args.path, data_only=args.values, read_only=True)
    names = [args.sheet] if args.sheet else book.sheetnames
    result = {name: [list(row) for row in book[name].iter_rows(values_only=True)] for name in names}
    if args.json:
        json.dump(result, sys.stdout, default=str, indent=1)
        print()
        return
    writer = csv.writer(sys.stdout)
    for name, rows in result.items():
        if len(names) > 1:
            print(f"# {name}")
        writer.writerows(["" if value is None else value for value in row] for row in rows)


if __name__ == "__main__":
    main()
