"""Java ``String.hashCode`` as RocketMQ uses it.

RocketMQ derives the ConsumeQueue ``tagsCode`` from ``(long) tags.hashCode()``
(``MessageExtBrokerInner.tagsString2tagsCode``) and IndexFile key hashes from
``Math.abs(key.hashCode())`` (``IndexFile.indexKeyHashMethod``). Java hashes UTF-16 code units:
``h = 31*h + c`` in 32-bit two's-complement arithmetic.

No per-character Python loop: the exact value ``sum(c[i] * 31**(n-1-i))`` is the string read as
a base-31 numeral whose digits may exceed 30. Splitting every code unit ``c`` into base-31 digits
(``c = d3*31**3 + d2*31**2 + d1*31 + d0``) gives up to four proper base-31 numerals, each made
with one ``bytes.translate`` and read with one ``int(..., 31)`` (both in C). The hash of a
concatenation combines from the parts: ``h(a + b) = h(a) * 31**len(b) + h(b) (mod 2**32)``,
which the index uses for ``topic#key``.
"""

from __future__ import annotations

from functools import lru_cache

_MASK = 0xFFFFFFFF
_DIGITS = b"0123456789abcdefghijklmnopqrstu"  # base-31 digit characters for int(x, 31)
_CHUNK = 512  # int(text, 31) is quadratic in the length: hash long strings in chunks
# Translation tables (bytes -> base-31 digit characters) for ASCII: c = q*31 + r, q <= 4.
_ASCII_R = bytes(_DIGITS[c % 31] for c in range(128)) + bytes(128)
_ASCII_Q = bytes(_DIGITS[c // 31] for c in range(128)) + bytes(128)


@lru_cache(maxsize=4096)
def pow31(n: int) -> int:
    """``31**n mod 2**32`` (cached)."""
    return pow(31, n, 1 << 32)


def _ascii_hash_u32(raw: bytes) -> int:
    """Unsigned hash of ASCII bytes (one code unit per byte)."""
    h = 0
    for i in range(0, len(raw), _CHUNK):
        part = raw[i : i + _CHUNK]
        v = int(part.translate(_ASCII_R), 31) + 31 * int(part.translate(_ASCII_Q), 31)
        h = (h * pow31(len(part)) + v) & _MASK
    return h


def _plane_value(plane: bytes) -> int:
    """``sum(plane[j] * 31**(m-1-j))`` exactly, for bytes < 256 split as a*961 + q*31 + r."""
    return (
        int(plane.translate(_BYTE_R), 31)
        + 31 * int(plane.translate(_BYTE_Q), 31)
        + 961 * int(plane.translate(_BYTE_A), 31)
    )


def _utf16_hash_u32(s: str) -> int:
    """Unsigned hash over UTF-16 code units: each unit is ``hi*256 + lo``, so the value is
    ``256 * value(high bytes) + value(low bytes)`` (the polynomial is linear)."""
    units = s.encode("utf-16-be")
    h = 0
    step = 2 * _CHUNK
    for i in range(0, len(units), step):
        part = units[i : i + step]
        v = 256 * _plane_value(part[0::2]) + _plane_value(part[1::2])
        h = (h * pow31(len(part) // 2) + v) & _MASK
    return h


# Any byte b = a*961 + q*31 + r with a, q, r < 31 (b < 256 < 29791).
_BYTE_R = bytes(_DIGITS[b % 31] for b in range(256))
_BYTE_Q = bytes(_DIGITS[(b // 31) % 31] for b in range(256))
_BYTE_A = bytes(_DIGITS[b // 961] for b in range(256))


def java_hash_u32(s: str) -> int:
    """Java's ``s.hashCode()`` as an unsigned 32-bit int (``& 0xFFFFFFFF``)."""
    if not s:
        return 0
    if s.isascii():
        return _ascii_hash_u32(s.encode("ascii"))
    return _utf16_hash_u32(s)


def utf16_len(s: str) -> int:
    """Java ``String.length()``: UTF-16 code units (characters outside the BMP count 2)."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-be")) // 2


def combine_u32(prefix_hash: int, suffix_hash: int, suffix_len: int) -> int:
    """Unsigned hash of ``prefix + suffix`` from the parts' unsigned hashes and the suffix's
    length in UTF-16 code units."""
    return (prefix_hash * pow31(suffix_len) + suffix_hash) & _MASK


def to_signed(h: int) -> int:
    """An unsigned 32-bit value as Java's signed int."""
    return h - (1 << 32) if h & 0x80000000 else h


def key_hash_of_u32(h: int) -> int:
    """IndexFile ``keyHash`` from an unsigned hash: ``abs`` of the signed int,
    ``Integer.MIN_VALUE`` mapped to 0 (``IndexFile.indexKeyHashMethod``)."""
    if h & 0x80000000:
        h = (1 << 32) - h  # abs of the negative signed value
        return 0 if h > 0x7FFFFFFF else h
    return h


def java_string_hash(s: str) -> int:
    """Return Java's ``s.hashCode()`` as a signed 32-bit int.

    Characters outside the BMP count as two UTF-16 code units, as in Java.
    """
    return to_signed(java_hash_u32(s))


def tags_code(tags: str | None) -> int:
    """ConsumeQueue ``tagsCode`` for a TAGS property: its Java hash sign-extended, 0 if none."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile ``keyHash``: ``abs(key.hashCode())``, with ``Integer.MIN_VALUE`` mapped to 0."""
    return key_hash_of_u32(java_hash_u32(key))
