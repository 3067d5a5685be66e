"""The files verify lists in a store's directories, through a store source: every file with a
segment or IndexFile name, misnamed, mis-sized or not a regular file included (a broker's
``MappedFileQueue`` skips or refuses those; verify reports them).
"""

from __future__ import annotations

import os

from ...format.indexfile import INDEX_FILE_NAME
from ...format.mappedfile import segment_names
from ...format.source import LOCAL, StoreSource


def rel_path(path: str, root: str) -> str:
    """``path`` relative to the store root ``root`` (a local path or a source's root URI)."""
    return path[len(root) + 1 :] if path.startswith(root + "/") else os.path.relpath(path, root)


def segment_files(directory: str, source: StoreSource = LOCAL) -> list[str]:
    """Segment names in a CommitLog, ConsumeQueue or timerlog directory
    (``mappedfile.segment_names``), sorted; [] when it cannot be listed."""
    try:
        return segment_names(directory, source)
    except OSError:
        return []


def index_names(directory: str, source: StoreSource = LOCAL) -> list[str]:
    """IndexFile names (17-digit timestamps) in ``directory``, sorted; [] when it cannot be
    listed."""
    try:
        names = source.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if INDEX_FILE_NAME.fullmatch(n))


def regular_files(directory: str, names: list[str], source: StoreSource) -> list[str]:
    """The ``names`` that are regular files in ``directory``."""
    return [n for n in names if source.isfile(os.path.join(directory, n))]


def not_files(directory: str, names: list[str], source: StoreSource) -> list[str]:
    """The ``names`` (segment or IndexFile names) that are not regular files in ``directory``
    (a directory, say): a broker refuses them ("length not matched")."""
    return [n for n in names if not source.isfile(os.path.join(directory, n))]
