"""An in-memory stand-in for the caller's workspace-scoped lookup and bounded object reader.

It is the data the pure processors are given, not a fake of a Mango component: the real
callables (files/ selectors and storage) are exercised by the sessions tests."""

import hashlib

from processors.file_text import FileRef


class Store:
    def __init__(self, workspace: str = "alpha"):
        self.workspace = workspace
        self.files: dict[str, tuple[str, FileRef, bytes]] = {}
        self.reads: list[tuple[str, int]] = []
        self.lookups: list[str] = []

    def add(
        self,
        file_id: str,
        data: bytes,
        *,
        filename: str = "notes.txt",
        mime_type: str = "text/plain",
        workspace: str | None = None,
        size_bytes: int | None = None,
        sha256: str | None = None,
        stored: bytes | None = None,
        **fields,
    ) -> FileRef:
        """Register a File whose metadata describes `data`; `stored` (default `data`) is what the
        object store actually holds, so metadata and object can be made to disagree."""
        ref = FileRef(
            file_id=file_id,
            filename=filename,
            mime_type=mime_type,
            size_bytes=len(data) if size_bytes is None else size_bytes,
            sha256=hashlib.sha256(data).hexdigest() if sha256 is None else sha256,
            **fields,
        )
        self.files[file_id] = (workspace or self.workspace, ref, data if stored is None else stored)
        return ref

    def lookup(self, file_id: str) -> FileRef | None:
        self.lookups.append(file_id)
        entry = self.files.get(file_id)
        if entry is None or entry[0] != self.workspace:
            return None
        return entry[1]

    def read_bytes(self, ref: FileRef, limit: int) -> bytes:
        self.reads.append((ref.file_id, limit))
        entry = self.files.get(ref.file_id)
        if entry is None:
            raise FileNotFoundError(ref.file_id)
        return entry[2][:limit]

    def kw(self) -> dict:
        return {"lookup": self.lookup, "read_bytes": self.read_bytes}
