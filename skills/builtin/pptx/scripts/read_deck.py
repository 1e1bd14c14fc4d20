"""Print a .pptx's text slide by slide: python3 read_deck.py IN.pptx"""

import sys

from pptx import Presentation


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for number, slide in enumerate(Presentation(sys.argv[1]).slides, start=1):
        title = slide.shapes.title.text if slide.shapes.title is not None else ""
        print(f"## Slide {number}: {title}")
        for shape in slide.shapes:
            if shape == slide.shapes.title:
                continue
            if shape.has_text_frame:
                for paragraph in shape.text_frame.paragraphs:
                    if paragraph.text.strip():
                        print("  " * paragraph.level + "- " + paragraph.text)
            if getattr(shape, "has_table", False) and shape.has_table:
                for row in shape.table.rows:
                    print("| " + " | ".join(cell.text for cell in row.cells) + " |")
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame.text.strip():
            print("Notes: " + slide.notes_slide.notes_text_frame.text)


if __name__ == "__main__":
    main()
