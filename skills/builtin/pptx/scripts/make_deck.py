"""Write a .pptx from a JSON spec: python3 make_deck.py SPEC.json|- OUT.pptx"""

import json
import sys
from pathlib import Path

from pptx import Presentation
from pptx.util import Inches

TITLE, TITLE_AND_CONTENT, TITLE_ONLY = 0, 1, 5


def add_bullets(frame, bullets, level: int = 0, first: list | None = None) -> None:
    first = first if first is not None else [True]
    for item in bullets:
        if isinstance(item, list):
            add_bullets(frame, item, level + 1, first)
            continue
        paragraph = frame.paragraphs[0] if first[0] else frame.add_paragraph()
        first[0] = False
        paragraph.text = str(item)
        paragraph.level = min(level, 4)


def build(spec: dict) -> Presentation:
    deck = Presentation()
    if spec.get("title"):
        slide = deck.slides.add_slide(deck.slide_layouts[TITLE])
        slide.shapes.title.text = spec["title"]
        if spec.get("subtitle"):
            slide.placeholders[1].text = spec["subtitle"]
    for slide_spec in spec.get("slides") or []:
        if slide_spec.get("table"):
            slide = deck.slides.add_slide(deck.slide_layouts[TITLE_ONLY])
            rows = slide_spec["table"]
            columns = max(len(row) for row in rows)
            shape = slide.shapes.add_table(
                len(rows), columns, Inches(0.5), Inches(1.5), Inches(9), Inches(0.4) * len(rows)
            )
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    shape.table.cell(r, c).text = str(value)
        else:
            slide = deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT])
            add_bullets(slide.placeholders[1].text_frame, slide_spec.get("bullets") or [])
        slide.shapes.title.text = str(slide_spec.get("title") or "")
        if slide_spec.get("notes"):
            slide.notes_slide.notes_text_frame.text = str(slide_spec["notes"])
    return deck


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spec = json.loads(sys.stdin.read() if sys.argv[1] == "-" else Path(sys.argv[1]).read_text(encoding="utf-8"))
    build(spec).save(sys.argv[2])
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
