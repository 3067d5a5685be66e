"""Java ``String.hashCode`` as RocketMQ uses it.

RocketMQ derives the ConsumeQueue ``tagsCode`` from ``(long) tags.hashCode()``
(``MessageExtBrokerInner.tagsString2tagsCode``) and IndexFile key hashes from
``Math.abs(key.hashCode())`` (``IndexFile.indexKeyHashMethod``). Java hashes UTF-16 code units:
``h = 31*h + c`` in 32-bit two's-complement arithmetic.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """Return Java's ``s.hashCode()`` as a signed 32-bit int.

    Characters outside the BMP count as two UTF-16 code units, as in Java.
    """
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _MASK
    else:
        units = s.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """ConsumeQueue ``tagsCode`` for a TAGS property: its Java hash sign-extended, 0 if none."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile ``keyHash``: ``abs(key.hashCode())``, with ``Integer.MIN_VALUE`` mapped to 0."""
    h = abs(java_string_hash(key))
    return 0 if h > 0x7FFFFFFF else h
