import io
from collections.abc import Iterable, Iterator


class ChunkReader(io.RawIOBase):
    """A read-only file object over an iterable of byte chunks (e.g. an archive streamed by
    dockerd or an object streamed from S3), for readers such as tarfile's stream mode."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            try:
                self._pending = bytes(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def buffered_reader(chunks: Iterable[bytes], buffer_size: int = 1024 * 1024) -> io.BufferedReader:
    return io.BufferedReader(ChunkReader(chunks), buffer_size)
