"""One definition of the characters a file name may not carry, used by uploads (stripped),
session outputs and resource mount paths (refused). Pure: no database."""

import tarfile

import pytest

from files.naming import clean_filename
from processors.errors import InvalidMountPath
from processors.filenames import filename_shown, filename_strip, path_problem, unsafe_characters
from processors.outputs import classify_output_member
from processors.resources import resolve_mount_path

UNSAFE = [
    "\x00",
    "\n",
    "\r",
    "\x1b",
    "\x7f",
    "\x85",  # NEL (C1)
    "\x9b",  # CSI (C1)
    "\u2028",
    "\u2029",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]


@pytest.mark.parametrize("char", UNSAFE, ids=[f"U+{ord(c):04X}" for c in UNSAFE])
def test_every_unsafe_character_is_found_stripped_and_escaped(char):
    name = f"evil{char}txt.exe"
    assert unsafe_characters(name) == [f"U+{ord(char):04X}"]
    assert filename_strip(name) == "eviltxt.exe"
    assert filename_shown(name) == f"evil\\u{ord(char):04x}txt.exe"
    assert path_problem(name) and f"U+{ord(char):04X}" in path_problem(name)


@pytest.mark.parametrize("name", ["report.md", "ünï cøde.txt", "日本語.pdf", "emoji 👩\u200d💻.png", "a b\tc"[:3]])
def test_ordinary_names_are_safe(name):
    assert unsafe_characters(name) == []
    assert filename_strip(name) == name
    assert path_problem(name) is None


def test_upload_filenames_are_stripped():
    assert clean_filename("evil\u202etxt.exe", "application/octet-stream") == "eviltxt.exe"
    assert clean_filename("a\u2028b\x85c\u2066.txt", "text/plain") == "abc.txt"
    assert clean_filename("\u202e\u2069", "text/plain") == "unnamed.txt"
    assert clean_filename("dir/../x\r\ny.txt", "text/plain") == "xy.txt"


def _member(name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.REGTYPE
    return info


@pytest.mark.parametrize("char", ["\r", "\n", "\x85", "\u2028", "\u202e", "\u2066"])
def test_output_paths_with_unsafe_characters_are_refused_and_shown_escaped(char):
    kind, reason = classify_output_member(_member(f"outputs/evil{char}txt.exe"))
    assert kind == "invalid"
    assert f"U+{ord(char):04X}" in reason
    assert char not in reason and f"\\u{ord(char):04x}" in reason
    # A link's reason names the path too: escaped the same way.
    link = _member(f"outputs/l{char}")
    link.type = tarfile.SYMTYPE
    kind, reason = classify_output_member(link)
    assert kind == "invalid" and char not in reason


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u202e", "\u2066", "\n"])
def test_mount_paths_with_unsafe_characters_are_refused(char):
    with pytest.raises(InvalidMountPath) as raised:
        resolve_mount_path("file_x", f"/data/evil{char}txt.exe")
    assert char not in str(raised.value)
