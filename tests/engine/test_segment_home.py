"""One segment-file class (issue 22, section 1): a directory of fixed-size files named by their
20-digit start offset (RocketMQ's one ``MappedFileQueue``) is modelled by
``engine.format.mappedfile.MappedFiles`` (read-only: listing, offset to file, mmaps) and its
writable subclass ``FileQueue`` (descriptors, create, truncate, delete, a follower's refresh).
No module of engine/, fusefs/, mount/ or pipeline/ outside engine/format/ lists such a
directory or maps its files with rules of its own. The source is read with ``ast``."""

import os

import pytest

from homes import names_used, uses_outside

HOME = "engine/format/"
#: what a module needs to list or map segment files itself
SEGMENT_NAMES = {"segment_names", "list_segments", "SEGMENT_NAME", "mmap"}
#: (file, name) still allowed, each with why
ALLOWED = {
    # verify reports every file with a segment name, misnamed or mis-sized ones included,
    # which MappedFiles (like a broker) does not address; it reads them through MappedFiles
    ("engine/tools/verify/listing.py", "segment_names"),
}


def segment_uses(source: str) -> list[tuple[int, str]]:
    """``[(line, name)]`` of the uses of :data:`SEGMENT_NAMES` in ``source`` (imports of those
    names, ``import mmap``, names and attributes)."""
    return names_used(source, SEGMENT_NAMES)


def test_segment_files_are_listed_and_mapped_in_the_format_module_only():
    found = uses_outside(HOME, SEGMENT_NAMES, ALLOWED)
    assert not found, (
        "read segment files through engine.format.mappedfile.MappedFiles (or FileQueue):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    "source, names",
    [
        ("from ..format.mappedfile import segment_names\n", ["segment_names"]),
        ("import mmap\nm = mmap.mmap(-1, 1)\n", ["mmap", "mmap", "mmap"]),
        ("x = mappedfile.list_segments(d)\n", ["list_segments"]),
        ('"""segment_names in a docstring"""\n# mmap in a comment\n', []),
    ],
)
def test_the_scanner_finds_a_use(source, names):
    assert sorted(n for _, n in segment_uses(source)) == sorted(names)


def test_file_queue_is_mapped_files(tmp_path):
    """A FileQueue (the writer's) reads its files through the same mmaps as MappedFiles (the
    reader's), and a MappedFiles over its directory lists the same files."""
    from rmqfs.engine.format.mappedfile import FileQueue, MappedFiles

    d = str(tmp_path / "q")
    fq = FileQueue(d, 64)
    try:
        assert isinstance(fq, MappedFiles)
        fq.write(0, b"a" * 64)
        fq.write(64, b"bc")
        m, pos = fq.locate(65)
        assert (bytes(m[pos : pos + 1]), pos) == (b"c", 1)
        assert fq.read(64, 2) == b"bc"
        assert fq.locate(128) is None  # past the last file: not listed again
        ro = MappedFiles(d)
        try:
            assert [(s.start, s.size) for s in ro.segments] == [(0, 64), (64, 64)]
            assert (ro.file_size, ro.min_offset, ro.end_offset) == (64, 0, 128)
            fq.write(128, b"d")  # a new file: the reader lists again when asked past its end
            m, pos = ro.locate(128)
            assert bytes(m[pos : pos + 1]) == b"d"
        finally:
            ro.close()
    finally:
        fq.close()


def test_mapped_files_tolerates_what_a_live_writer_leaves(tmp_path):
    """A gap, an empty file being created and a non-file are listed as RocketMQ's reader
    would see them: an offset in a missing file reads as absent, the others are found."""
    from rmqfs.engine.format.mappedfile import MappedFiles

    d = tmp_path / "q"
    d.mkdir()
    for start, data in ((0, b"A" * 32), (64, b"C" * 32), (96, b"")):
        (d / f"{start:020d}").write_bytes(data)
    os.mkdir(d / f"{128:020d}")
    files = MappedFiles(str(d))
    try:
        assert [s.start for s in files.segments] == [0, 64]
        assert files.locate(40) is None  # in the missing file 32
        m, pos = files.locate(70)
        assert (bytes(m[pos : pos + 1]), pos) == (b"C", 6)
        assert files.find(100) is None
        assert files.locate(-1) is None
    finally:
        files.close()
