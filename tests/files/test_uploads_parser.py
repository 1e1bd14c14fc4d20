"""The streaming multipart reader on its own (no database, no store): framing edge cases, and
boundaries that straddle read boundaries."""

import io
import random

import pytest

from core.errors import InvalidRequest
from files.multipart import MultipartReader
from files.naming import clean_filename, resolve_mime_type
from files.uploads import UploadForm

BOUNDARY = b"----mango-test-boundary"


def body(*parts, preamble=b"", epilogue=b"\r\n"):
    out = preamble
    for headers, data in parts:
        out += b"--" + BOUNDARY + b"\r\n" + headers + b"\r\n\r\n" + data + b"\r\n"
    return out + b"--" + BOUNDARY + b"--" + epilogue


def file_part(data, filename=b'"a.bin"', name=b"file", ctype=b"application/octet-stream"):
    disp = b'Content-Disposition: form-data; name="' + name + b'"'
    if filename is not None:
        disp += b"; filename=" + filename
    return (disp + b"\r\nContent-Type: " + ctype, data)


def field_part(name, value):
    return (b'Content-Disposition: form-data; name="' + name + b'"', value)


def read_form(raw: bytes, read_size: int):
    reader = MultipartReader(io.BytesIO(raw), boundary=BOUNDARY, content_length=len(raw), read_size=read_size)
    form = UploadForm(reader, boundary=BOUNDARY)
    part = form.read_until_file()
    return form, part, b"".join(form.chunks())


@pytest.mark.parametrize("read_size", [1, 2, 7, 31, 64, 1000, 1 << 20])
def test_file_bytes_survive_any_read_size(read_size):
    rng = random.Random(read_size)
    # Data that contains near-misses of the delimiter.
    data = bytes(rng.getrandbits(8) for _ in range(5000)) + b"\r\n--" + BOUNDARY[:-1] + b"x\r\n-" + b"\r\n"
    raw = body(field_part(b"expires_in_seconds", b"3600"), file_part(data))
    form, part, got = read_form(raw, read_size)
    assert got == data
    assert form.fields == {"expires_in_seconds": "3600"}
    assert part.filename == "a.bin" and part.content_type == "application/octet-stream"


def test_part_without_filename_is_the_file():
    _, part, got = read_form(body(file_part(b"raw", filename=None)), 13)
    assert part.filename is None and got == b"raw"


def test_rfc2231_filename_and_preamble():
    raw = body(file_part(b"x", filename=b"\"fallback\"; filename*=UTF-8''%E2%82%AC.txt"), preamble=b"ignored\r\n")
    _, part, _ = read_form(raw, 5)
    assert part.filename == "€.txt"


def test_empty_file():
    _, _, got = read_form(body(file_part(b"")), 3)
    assert got == b""


@pytest.mark.parametrize(
    "raw, message",
    [
        (body(field_part(b"other", b"x")), "Missing file"),
        (body(file_part(b"a", name=b"upload")), "'upload'"),
        (body(file_part(b"a"), file_part(b"b")), "More than one file"),
        (body(file_part(b"a"), field_part(b"expires_in_seconds", b"3600")), "before the `file` part"),
        (body(file_part(b"abc"))[:-20], "ended inside a part"),
        (b"no boundary here at all", "truncated preamble"),
    ],
)
def test_malformed_bodies_are_400(raw, message):
    with pytest.raises(InvalidRequest) as excinfo:
        read_form(raw, 4)
    assert message in excinfo.value.message


def test_filename_rule():
    assert clean_filename("../../etc/passwd", "text/plain") == "passwd"
    assert clean_filename("C:\\Users\\me\\report.pdf", "application/pdf") == "report.pdf"
    assert clean_filename(None, "application/pdf") == "unnamed.pdf"
    assert clean_filename("", "text/plain") == "unnamed.txt"
    assert clean_filename(None, "application/x-mango-unknown") == "unnamed"
    assert clean_filename("a\r\nb\x00c\x7f.txt", "text/plain") == "abc.txt"
    assert clean_filename("\r\n", "text/plain") == "unnamed.txt"


def test_mime_type_rule():
    assert resolve_mime_type("text/csv", "a.txt") == "text/csv"
    assert resolve_mime_type(None, "a.pdf") == "application/pdf"
    assert resolve_mime_type(None, "noext") == "application/octet-stream"
    assert resolve_mime_type("text/" + "x" * 300, "a.txt") == "text/plain"
    assert resolve_mime_type("not a type", None) == "application/octet-stream"


class _ReadOnly:
    """A body stream without readinto (the parser then copies each read into place)."""

    def __init__(self, raw: bytes, read_size: int):
        self._stream = io.BytesIO(raw)
        self._read_size = read_size

    def read(self, size: int) -> bytes:
        return self._stream.read(min(size, self._read_size))


class _ShortReads(io.BytesIO):
    """readinto that returns at most read_size bytes per call, like a socket."""

    def __init__(self, raw: bytes, read_size: int):
        super().__init__(raw)
        self._read_size = read_size

    def readinto(self, view) -> int:
        return super().readinto(memoryview(view)[: self._read_size])


def read_form_into(raw: bytes, stream, region: int) -> tuple[UploadForm, bytes]:
    """The file part through UploadForm.readinto, into a buffer `region` bytes at a time
    (and refilled from the start whenever full, as the upload service does with parts)."""
    reader = MultipartReader(stream, boundary=BOUNDARY, content_length=len(raw), read_size=64)
    form = UploadForm(reader, boundary=BOUNDARY)
    form.read_until_file()
    buffer = bytearray(region * 3 + 5)
    got = bytearray()
    filled = 0
    while True:
        if filled == len(buffer):
            got += buffer
            filled = 0
        count = form.readinto(buffer, filled, min(filled + region, len(buffer)))
        if not count:
            break
        filled += count
    got += buffer[:filled]
    return form, bytes(got)


@pytest.mark.parametrize("read_size", [1, 7, 64, 1000, 1 << 20])
@pytest.mark.parametrize("region", [1, 2, 30, 47, 500, 4096])
@pytest.mark.parametrize("readinto", [True, False], ids=["readinto", "read"])
def test_file_bytes_read_in_place_survive_any_read_and_region_size(read_size, region, readinto):
    rng = random.Random(read_size * 7919 + region)
    data = bytes(rng.getrandbits(8) for _ in range(5000)) + b"\r\n--" + BOUNDARY[:-1] + b"x\r\n-" + b"\r\n"
    raw = body(field_part(b"expires_in_seconds", b"3600"), file_part(data))
    stream = _ShortReads(raw, read_size) if readinto else _ReadOnly(raw, read_size)
    form, got = read_form_into(raw, stream, region)
    assert got == data
    assert form.fields == {"expires_in_seconds": "3600"}


@pytest.mark.parametrize(
    "raw, message",
    [
        (body(file_part(b"a"), file_part(b"b")), "More than one file"),
        (body(file_part(b"a"), field_part(b"expires_in_seconds", b"3600")), "before the `file` part"),
        (body(file_part(b"abc" * 1000))[:-20], "ended inside a part"),
    ],
)
@pytest.mark.parametrize("region", [3, 100, 1 << 16])
def test_malformed_bodies_read_in_place_are_400(raw, message, region):
    with pytest.raises(InvalidRequest) as excinfo:
        read_form_into(raw, _ShortReads(raw, 333), region)
    assert message in excinfo.value.message
