"""sandboxes/tarchunks.py, pure: a tar stream cut at member boundaries comes back whole, and a
small change to a large tree changes few chunks."""

import io
import os
import random
import tarfile

from sandboxes import tarchunks


def _archive(files: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_000_000
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("d/link")
        link.type, link.linkname = tarfile.SYMTYPE, "x" * 300  # a pax header for the long target
        tar.addfile(link)
    return buffer.getvalue()


def _cut(data: bytes, piece: int = 65536) -> list[bytes]:
    return list(tarchunks.chunks(data[i : i + piece] for i in range(0, len(data), piece)))


def test_chunks_are_the_stream_cut_at_member_boundaries_and_a_small_change_changes_few():
    rng = random.Random(7)
    files = [(f"d/{'n' * rng.randint(1, 150)}{i}", os.urandom(rng.choice([10, 900, 40_000]))) for i in range(1500)]
    files.insert(700, ("big.bin", os.urandom(20 * 1024 * 1024)))
    before = _archive(files)
    chunks = _cut(before)
    assert b"".join(chunks) == before
    assert max(map(len, chunks)) <= tarchunks.CHUNK_BYTES
    assert _cut(before, 7) == chunks  # however the stream arrives
    # One small file rewritten, one grown, 1 MiB changed in place inside the big one.
    files[100] = (files[100][0], os.urandom(len(files[100][1])))
    files[1200] = (files[1200][0], files[1200][1] + b"more")
    big = bytearray(files[700][1])
    big[9 * 1024 * 1024 : 10 * 1024 * 1024] = os.urandom(1024 * 1024)
    files[700] = ("big.bin", bytes(big))
    after = _archive(files)
    new_chunks = _cut(after)
    assert b"".join(new_chunks) == after
    old = {tarchunks.digest(chunk) for chunk in chunks}
    changed = [chunk for chunk in new_chunks if tarchunks.digest(chunk) not in old]
    assert len(changed) <= 6, len(changed)
    assert sum(map(len, changed)) <= 3 * tarchunks.CHUNK_BYTES + 2 * 1024 * 1024
