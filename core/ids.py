"""Public ids: a type prefix plus a time-ordered, random body.

The body is 10 characters of millisecond time then 16 random characters, both in Crockford
base32, so ids sort by creation time (handy for keyset pagination) and cannot be guessed.
"""

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{_encode(millis, 10)}{_encode(secrets.randbits(80), 16)}"
