"""Admitted content rendered for the model (DESIGN flow 4): each File document of a `user.message`
becomes an ordinary text block built from its admission snapshot, never from the live File.
Pure, as all of processors/; admission itself (what may be admitted) is processors/admission.py.
"""

import copy
import html

from processors.admission import is_file_block


def _attr(value: str) -> str:
    return html.escape(value, quote=True).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")


def render_document_text(snapshot: dict, *, title: str | None = None, context: str | None = None) -> str:
    """`<document filename="…" media_type="…">\\n…\\n</document>`, attribute values escaped.
    The File id is deliberately absent: the model sees content, not our identifiers."""
    attrs = [f'filename="{_attr(snapshot.get("filename") or "")}"', f'media_type="{_attr(snapshot["media_type"])}"']
    if title:
        attrs.append(f'title="{_attr(title)}"')
    if context:
        attrs.append(f'context="{_attr(context)}"')
    text = snapshot["text"]
    tail = "" if text.endswith("\n") else "\n"
    return f"<document {' '.join(attrs)}>\n{text}{tail}</document>"


def render_message_for_model(content: list[dict], snapshots: list[dict]) -> list[dict]:
    """Rewrite admitted `user.message` content for the model: each File document becomes an
    ordinary text block (from its snapshot, never from the live File); `redacted` blocks are
    dropped (the Messages API has no such user block); every other block is passed unchanged.
    Raises ValueError if a File document has no matching snapshot (it was never admitted)."""
    by_index = {s["index"]: s for s in snapshots}
    rendered = []
    for index, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "redacted":
            continue
        if not is_file_block(block):
            rendered.append(copy.deepcopy(block))
            continue
        snapshot = by_index.get(index)
        if snapshot is None or snapshot.get("file_id") != block["source"]["file_id"]:
            raise ValueError(f"content[{index}]: no admitted snapshot for this File block")
        if "kind" in snapshot:  # a PDF or image: its private copy, sent as base64 at each call
            if not snapshot.get("copy_id"):
                raise ValueError(f"content[{index}]: the admitted {snapshot['kind']} has no private copy")
            source = {"type": "snapshot", "file_id": snapshot["copy_id"], "media_type": snapshot["media_type"]}
            rendered.append({**copy.deepcopy(block), "source": source})
            continue
        text_block = {
            "type": "text",
            "text": render_document_text(snapshot, title=block.get("title"), context=block.get("context")),
        }
        if block.get("cache_control"):
            text_block["cache_control"] = copy.deepcopy(block["cache_control"])
        rendered.append(text_block)
    return rendered
