"""Characters a file name or path may not carry, in one place for uploads, outputs and
resources. Pure.

Unsafe: C0 and C1 control characters and DEL (CR/LF split headers and log lines), the line and
paragraph separators U+2028/U+2029, and the bidirectional formatting characters, which make a
name display as something else (`evil\\u202etxt.exe` shows as "evilexe.txt").

Names that are only labels (an upload's filename, the filename a resource copy inherits) have
these characters stripped; paths that address something (a session output's path, a
resource's mount path) are refused, since stripping would silently name another file.
"""

import re

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\u2028\u2029{_BIDI}]")


def unsafe_characters(name: str) -> list[str]:
    """The unsafe characters in `name`, as sorted `U+XXXX` code points (empty when safe)."""
    return sorted({f"U+{ord(char):04X}" for char in _UNSAFE.findall(name)})


def filename_strip(name: str) -> str:
    """`name` without its unsafe characters."""
    return _UNSAFE.sub("", name)


def filename_shown(name: str) -> str:
    """`name` fit for a message or a log line: unsafe characters written as \\uXXXX escapes."""
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", name)


def path_problem(path: str) -> str | None:
    """Why `path` may not be used as a file path (None when it may)."""
    found = unsafe_characters(path)
    if not found:
        return None
    return f"contains control, line-separator or bidirectional-override characters ({', '.join(found[:5])})"
