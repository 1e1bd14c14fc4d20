"""A tar stream cut into chunks at member boundaries, for incremental checkpoints (pure: bytes in,
bytes out; bounded memory).

A sandbox's checkpoint is the tar stream dockerd archives a directory into (modes, owners,
symlinks and mtimes in its headers), kept as a list of chunks; restoring is streaming the chunks,
in order, back into dockerd. The same bytes come back, so the tree is byte-identical. For the
next checkpoint to upload only what changed, the cuts must fall at the same places in an
unchanged part of the stream however other parts changed:

* a member (its extended headers, header and data) of at most ``PIECE_BYTES`` is never split; a
  larger one starts a chunk of its own and is cut every ``PIECE_BYTES`` (1 MiB), counted from its
  header, so an in-place change of a big file re-uploads about what changed;
* small members are packed, and a pack ends after a member whose name hashes to 0 modulo
  ``PACK_MODULUS`` (a cut decided by content, not by offset: an inserted or grown file moves no
  cut outside its own pack), or before the member that would take it past ``CHUNK_BYTES``.

Docker writes headers with whole-second mtimes and no access or change times, so an unchanged
tree archives to the same bytes.
"""

import hashlib
from collections.abc import Iterable, Iterator

BLOCK = 512
CHUNK_BYTES = 4 * 1024 * 1024  # the most a pack of small members holds
PIECE_BYTES = 1024 * 1024  # a large member's pieces
PACK_MODULUS = 64


class TarStreamError(ValueError):
    """The archive is not a tar stream this reader understands."""


class _Reader:
    """Exact reads from an iterable of byte chunks (bounded buffering)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._buffer = bytearray()
        self.eof = False

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and not self.eof:
            try:
                self._buffer += next(self._chunks)
            except StopIteration:
                self.eof = True
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def rest(self) -> bytes:
        data = bytearray(self._buffer)
        self._buffer.clear()
        for chunk in self._chunks:
            data += chunk
        self.eof = True
        return bytes(data)


def _size(header: bytes) -> int:
    field = header[124:136]
    if field[0] & 0x80:  # base-256 (GNU) for large sizes
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise TarStreamError(f"bad size field {field!r}") from None


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


def _members(reader: _Reader) -> Iterator[tuple[bytes, bytes, int]]:
    """(name, the member's headers, its padded data size) per member, headers read; the caller
    reads the data. Extended (pax `x`/`g`) and GNU long-name (`L`/`K`) headers go with the member
    they precede. At the end, (b"", trailer, 0) with everything after the last member."""
    while True:
        headers = bytearray()
        name = b""
        while True:
            header = reader.read(BLOCK)
            if len(header) < BLOCK or header == bytes(BLOCK):
                yield b"", bytes(headers) + header + reader.rest(), 0
                return
            kind = header[156:157]
            size = _size(header)
            if kind in (b"x", b"g", b"L", b"K"):
                extra = reader.read(_padded(size))
                headers += header + extra
                if kind == b"L":
                    name = extra[:size].rstrip(b"\0")
                elif kind == b"x":
                    for record in extra[:size].split(b"\n"):
                        if b" path=" in record:
                            name = record.split(b" path=", 1)[1]
                continue
            headers += header
            if not name:
                name = header[345:500].rstrip(b"\0") + b"/" + header[0:100].rstrip(b"\0")
            yield name, bytes(headers), _padded(size)
            break


def chunks(stream: Iterable[bytes]) -> Iterator[bytes]:
    """The tar stream, cut as the module says. The concatenation of what it yields is the stream."""
    reader = _Reader(stream)
    pack = bytearray()
    for name, headers, data_size in _members(reader):
        if not name:  # the trailer
            pack += headers
            if pack:
                yield bytes(pack)
            return
        if len(headers) + data_size > PIECE_BYTES:
            if pack:
                yield bytes(pack)
                pack = bytearray()
            piece = bytearray(headers)
            left = data_size
            while left:
                take = min(PIECE_BYTES - len(piece), left)
                data = reader.read(take)
                if len(data) < take:
                    raise TarStreamError("the archive ended inside a member")
                piece += data
                left -= take
                if len(piece) >= PIECE_BYTES:
                    yield bytes(piece)
                    piece = bytearray()
            if piece:
                yield bytes(piece)
            continue
        if len(pack) + len(headers) + data_size > CHUNK_BYTES:
            yield bytes(pack)
            pack = bytearray()
        data = reader.read(data_size)
        if len(data) < data_size:
            raise TarStreamError("the archive ended inside a member")
        pack += headers + data
        if int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big") % PACK_MODULUS == 0:
            yield bytes(pack)
            pack = bytearray()


def digest(data: bytes) -> str:
    """A chunk's name: its SHA-256, hex."""
    return hashlib.sha256(data).hexdigest()
