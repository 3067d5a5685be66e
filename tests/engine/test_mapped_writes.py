"""Writes through mappings (issue 34): the CommitLog, ConsumeQueue and IndexFile bytes go into
shared writable mmaps of the files (``FileQueue.write``, ``indexfile._MapIO``) with the blocks
allocated first, so a full disk is an ``OSError(ENOSPC)`` and never a SIGBUS, and what a put
acknowledged is what a reader finds.

* On a real full disk (a small tmpfs) single puts and batches of the compiled path, with the
  IndexFile on, fail with ENOSPC; the process lives on; what was acknowledged is exactly what
  tests/refreader.py reads back and the store verifies clean after the disk has room again.
* A tail cut (``truncate_dirty`` after a failed put) frees the blocks; the next write
  allocates them again.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import refreader
from conftest import SRC_PATH
from rmqfs.engine.format.mappedfile import FileQueue
from rmqfs.engine.store import Message, MessageStore, StoreConfig

FILL = r"""
import errno, os, sys
from rmqfs.engine.store import Message, MessageStore, StoreConfig
cfg = StoreConfig(
    mapped_file_size_commit_log=1 << 20,
    mapped_file_size_consume_queue=6000,
    max_hash_slot_num=1000,
    max_index_num=4000,
    disk_space_warning_level_ratio=0.9999,
    disk_space_clean_forcibly_ratio=0.9999,
)
s = MessageStore(sys.argv[1], cfg)
s.create_topic("T", 3)
acked, refused, i = [], 0, 0
while refused < 20:
    n = 1 if i % 3 else 16
    msgs = [Message("T", b"%07d-" % (i + k) + b"p" * 900, keys=[f"k{i + k}"]) for k in range(n)]
    i += n
    s.disk_full = False  # what the clean service says is not what this test is about
    try:
        s.put_messages(msgs)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        refused += 1
        continue
    acked += [m.body for m in msgs]
s.close()
print(" ".join(b[:7].decode() for b in acked))
"""


@pytest.fixture
def small_disk():
    """A 4 MiB tmpfs (root only)."""
    d = Path(tempfile.mkdtemp(prefix="rmqfs-mapfull-"))
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], capture_output=True, text=True
    )
    if res.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip(f"cannot mount a tmpfs: {res.stderr}")
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def test_a_full_disk_refuses_puts_without_a_sigbus(small_disk):
    from rmqfs.engine.tools.verify import verify_store

    root = small_disk / "store"
    env = dict(os.environ, PYTHONPATH=SRC_PATH)
    res = subprocess.run(
        [sys.executable, "-c", FILL, str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]  # -7 would be the SIGBUS
    acked = res.stdout.split()
    assert len(acked) > 1000
    recs = refreader.read_commitlog(root / "commitlog")
    bodies = [r["body"] for r in recs]
    assert [b[:7].decode() for b in bodies] == acked
    cfg = StoreConfig(
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=1000,
        max_index_num=4000,
    )
    with MessageStore(str(root), cfg) as s:
        got = [r.body for q in range(3) for _, r in s.iter_queue("T", q)]
        assert sorted(got) == sorted(bodies)
        last = bodies[-1][:7].decode()
        assert [r.body for r in s.query_by_key("T", f"k{int(last)}")] == [bodies[-1]]
    assert verify_store(str(root), cfg).ok


def test_a_cut_tail_is_allocated_again(tmp_path):
    fq = FileQueue(str(tmp_path / "q"), 1 << 20)
    fq.write(0, b"a" * 5000)
    fq.write(5000, b"b" * 5000)
    fq.truncate_dirty(4096)
    fd = fq.segments[0].fd
    assert os.pread(fd, 8192, 0) == b"a" * 4096 + bytes(4096)
    for pos in range(4096, 4096 + 300_000, 3000):  # mapped writes into blocks the cut freed
        fq.write(pos, b"c" * 3000)
    fq.write(4096 + 300_000, b"d" * 20_000)  # a large one: pwrite
    fq.write(4096 + 320_000, b"e" * 10)
    assert os.pread(fd, 320_010, 4096) == b"c" * 300_000 + b"d" * 20_000 + b"e" * 10
    assert os.fstat(fd).st_size == 1 << 20
    fq.close()


def test_refused_allocation_writes_nothing(tmp_path, monkeypatch):
    fq = FileQueue(str(tmp_path / "q"), 1 << 20)
    fq.write(0, b"a" * 10)

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as exc:
        fq.write(1 << 19, b"z" * 100)
    assert exc.value.errno == errno.ENOSPC
    assert os.pread(fq.segments[0].fd, 100, 1 << 19) == bytes(100)
    monkeypatch.undo()
    fq.write(1 << 19, b"z" * 100)
    assert os.pread(fq.segments[0].fd, 100, 1 << 19) == b"z" * 100
    fq.close()


def test_store_reads_back_what_mapped_writes_put(tmp_path):
    """Puts across CommitLog segments, ConsumeQueue files and IndexFiles, single and batched:
    refreader reads every record back and the store finds each key."""
    cfg = StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    root = tmp_path / "s"
    want = []
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 2)
        for i in range(600):
            n = 1 if i % 5 else 7
            msgs = [Message("T", b"m%d-%d" % (i, k) * 20, keys=[f"k{i}-{k}"]) for k in range(n)]
            s.put_messages(msgs)
            want += [m.body for m in msgs]
    recs = refreader.read_commitlog(root / "commitlog")
    assert [r["body"] for r in recs] == want
    with MessageStore(str(root), cfg) as s:
        assert [r.body for r in s.query_by_key("T", "k599-0")] == [want[-1]]
        assert [r.body for r in s.query_by_key("T", "k300-3")] == [b"m300-3" * 20]


def test_few_entry_puts_write_what_index_step_writes(tmp_path):
    """``IndexFile.put_hashed`` of one to four entries (its own short path) writes the bytes
    of the general step (:func:`indexfile.index_step`), through a file's fill, with store
    times before, at and far after its begin time and entries sharing a slot."""
    import random

    from rmqfs.engine.format import indexfile

    rng = random.Random(7)
    a = indexfile.IndexFile(str(tmp_path / "a"), 16, 64)
    b = indexfile.IndexFile(str(tmp_path / "b"), 16, 64)
    t = 1_700_000_000_000
    stored = 0
    for i in range(40):
        e = []
        for k in range(rng.randint(1, 4)):
            ts = t + rng.choice((-5000, 0, 999, 1000, 1 << 45))
            e += [rng.choice((5, 21, rng.randrange(1 << 31))), 100 * i + k, ts]
        got = a.put_hashed(e)
        assert got == b.put_hashed(e, 0, indexfile.index_step)
        stored += got
        assert a.header_fields() == b.header_fields()
    assert stored == 63
    a.close()
    b.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_in_place_index_writes_are_index_steps(tmp_path):
    """The compiled writer into the IndexFile's mapping (``kernel.IndexWriter``,
    ``rmq_index_put_mapped``) writes the bytes of the Python step (:func:`indexfile.index_step`,
    written with ``pwrite``s), batch by batch through a file's fill and into the next: single
    entries and batches, entries sharing a slot, store times before, at and far after the
    begin time, the chunks under each write allocated as they are first touched."""
    import random

    from rmqfs.engine.format import indexfile
    from rmqfs.engine.read import kernel

    writer = kernel.load().index_writer()
    rng = random.Random(11)
    t = 1_700_000_000_000
    for geometry in ((16, 64), (3000, 700)):  # a table of one page; one over three pages
        a = indexfile.IndexFile(str(tmp_path / f"a{geometry[0]}"), *geometry)
        b = indexfile.IndexFile(str(tmp_path / f"b{geometry[0]}"), *geometry)
        stored = i = 0
        while a.index_count < a.index_num:
            e = []
            for k in range(rng.choice((1, 1, 2, 5, 40))):
                ts = t + rng.choice((-5000, 0, 999, 1000, 1 << 45))
                e += [rng.choice((5, 21, rng.randrange(1 << 31))), 100 * i + k, ts]
            i += 1
            got = a.put_hashed(e, 0, None, writer)
            assert got == b.put_hashed(e, 0, indexfile.index_step)
            stored += got
            assert a.header_fields() == b.header_fields()
        assert stored == geometry[1] - 1
        a.close()
        b.close()
        assert (tmp_path / f"a{geometry[0]}").read_bytes() == (
            tmp_path / f"b{geometry[0]}"
        ).read_bytes()


def test_in_place_and_python_index_writes_take_turns_on_one_file(tmp_path):
    """Puts through the mapping (the compiled writer, chain heads read from the file's slots)
    and puts by the steps of Python (which keep a slot table in memory: few entries, or
    batches) taking turns on one file write what the Python step alone writes: neither path
    builds a chain on heads the other has moved since."""
    import random

    from rmqfs.engine.format import indexfile
    from rmqfs.engine.read import kernel

    writer = kernel.load().index_writer()
    rng = random.Random(5)
    t = 1_700_000_000_000
    a = indexfile.IndexFile(str(tmp_path / "a"), 16, 400)
    b = indexfile.IndexFile(str(tmp_path / "b"), 16, 400)
    for i in range(60):
        e = []
        for k in range(rng.choice((1, 2, 9))):
            e += [rng.choice((3, 19, 35, rng.randrange(1 << 31))), 100 * i + k, t + 1000 * i]
        step = rng.choice((None, indexfile.index_step))  # (None: the few-entry path, or step)
        got = a.put_hashed(e, 0, step, writer if i % 3 else None)
        assert got == b.put_hashed(e, 0, indexfile.index_step)
    a.close()
    b.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_in_place_index_write_refused_allocation_writes_nothing(tmp_path, monkeypatch):
    """A chunk that cannot be allocated (ENOSPC) refuses the in-place write before any byte
    of it is stored: the file and its header are as before, and the next write succeeds."""
    from rmqfs.engine.format import indexfile
    from rmqfs.engine.read import kernel

    writer = kernel.load().index_writer()
    path = tmp_path / "i"
    f = indexfile.IndexFile(str(path), 50000, 100)
    t = 1_700_000_000_000
    assert f.put_hashed([7, 100, t], 0, None, writer) == 1
    before, header = path.read_bytes(), f.header_fields()

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    assert (40 + 4 * 40000) // indexfile._MapIO.CHUNK != 0
    with pytest.raises(OSError) as exc:  # slot 40000's chunk of the table is new
        f.put_hashed([40000, 200, t + 1000], 0, None, writer)
    assert exc.value.errno == errno.ENOSPC
    assert path.read_bytes() == before and f.header_fields() == header
    monkeypatch.undo()
    assert f.put_hashed([40000, 200, t + 1000], 0, None, writer) == 1
    assert f.header_fields()[5] == 3
    f.close()


def test_an_index_file_cut_below_full_is_written_in_place_again(tmp_path):
    """A file that filled gives up its mapping (no more puts); a cut (an undone batch) that
    gives it room again maps it again, and the in-place writer writes what the Python step
    writes into it."""
    from rmqfs.engine.format import indexfile
    from rmqfs.engine.read import kernel

    writer = kernel.load().index_writer()
    t = 1_700_000_000_000
    files = [indexfile.IndexFile(str(tmp_path / n), 16, 8) for n in ("a", "b")]
    for f, w in zip(files, (writer, None)):
        entries = [x for i in range(7) for x in (i * 5, 100 * (i + 1), t)]
        assert f.put_hashed(entries, 0, None, w) == 7 and f.is_write_full
        assert type(f._io) is indexfile._FdIO  # a full file: no mapping
        assert f.truncate(400) == 4  # items at 400 and after are undone
        assert type(f._io) is indexfile._MapIO
        assert f.put_hashed([3, 900, t + 5000], 0, None, w) == 1
    for f in files:
        f.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_a_write_window_is_the_allocated_mapped_room(tmp_path, monkeypatch):
    """``FileQueue.write_window`` hands out only what ``write`` would store through the
    mapping: the file mapped for writing, blocks allocated first, at least ``n`` bytes before
    the file's end; None for a large write, another file, a crossing of the file's end; a
    refused allocation is an OSError with nothing written."""
    from rmqfs.engine.format.mappedfile import MAPPED_WRITE_MAX

    fq = FileQueue(str(tmp_path / "q"), 1 << 20)
    assert fq.write_window(0, 10) is None  # nothing mapped yet: write() maps the file
    fq.write(0, b"a" * 10)
    m, pos, room = fq.write_window(10, 100)
    assert pos == 10 and room >= 100
    m[pos : pos + 3] = b"xyz"
    assert os.pread(fq.segments[0].fd, 4, 9) == b"axyz"
    assert fq.write_window(10, MAPPED_WRITE_MAX) is None  # write() pwrites it
    assert fq.write_window((1 << 20) - 50, 100) is None  # crosses the file's end
    assert fq.write_window(1 << 20, 10) is None  # the next file: write() creates it
    m, pos, room = fq.write_window((1 << 20) - 100, 100)
    assert (pos, room) == ((1 << 20) - 100, 100)

    fq2 = FileQueue(str(tmp_path / "q2"), 1 << 22)
    fq2.write(0, b"b")

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as exc:
        fq2.write_window(3 << 20, 100)
    assert exc.value.errno == errno.ENOSPC
    monkeypatch.undo()
    m, pos, room = fq2.write_window(3 << 20, 100)
    assert (pos, room) == (3 << 20, 64 << 10)  # allocated to the step past it, no further
    fq2.write(2 << 20, b"c" * 10)
    fq2.truncate_dirty(1 << 20)  # the cut frees the blocks: the window shrinks to the cut
    m, pos, room = fq2.write_window((1 << 20) - 10, 10)
    assert room == 10
    fq.close()
    fq2.close()


def test_single_puts_store_their_records_in_place(tmp_path, monkeypatch):
    """A single put of the compiled path stores its record straight into the CommitLog
    segment's mapping (``rmq_put_one`` given the window), except one that starts the next
    segment or is as large as a mapped write gets, which goes through ``CommitLog``'s append:
    every record reads back the same (tests/refreader.py), across segment rolls."""
    from rmqfs.engine.format.commitlog import CommitLog

    in_place = []
    real = CommitLog.appended_in_place

    def counted(cl, end, ts):
        in_place.append(end - cl.max_offset)
        real(cl, end, ts)

    monkeypatch.setattr(CommitLog, "appended_in_place", counted)
    root = tmp_path / "s"
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024)
    want = []
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 2)
        for i in range(800):
            body = b"%05d" % i + (b"L" * 5000 if i % 100 == 7 else b"s" * (i % 300))
            s.put_messages([Message("T", body, tags="t", keys=[f"k{i}"])])
            want.append(body)
        ends = s.commitlog.files.segments
        assert len(ends) > 3  # the puts rolled segments
    recs = refreader.read_commitlog(root / "commitlog")
    assert [r["body"] for r in recs] == want
    large = sum(len(b) > 4096 for b in want)
    assert large == 8
    # all but the large ones and those that started a segment went in place
    assert len(want) - large - len(ends) <= len(in_place) <= len(want) - large
    assert all(0 < n < 4096 for n in in_place)


def test_a_single_put_the_lane_refuses_leaves_no_mapping_exported(tmp_path):
    """Whatever a single put's compiled lane refuses after it has exported the CommitLog's
    mapping (here a window whose room runs past the mapping: ``_putobj.Lane.put`` answers
    ``_LANE_ROW``, and the general path puts the message), the export ends with the call: the
    store closes (an export left open makes ``mmap.close`` raise BufferError there, the store
    lock left held), and opens and puts on after (a roll remaps the file)."""
    cfg = StoreConfig(mapped_file_size_commit_log=8 * 1024)
    root = str(tmp_path / "s")
    with MessageStore(root, cfg) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"first")])
        files = s.commitlog.files
        real = files.write_window
        asked = []

        def past_the_mapping(offset, n):
            w = real(offset, n)
            assert w is not None
            asked.append(offset)
            return (w[0], w[1], len(w[0]) - w[1] + 1)

        files.write_window = past_the_mapping
        s.put_messages([Message("T", b"general")])
        assert asked  # (the lane was handed the window)
    with MessageStore(root, cfg) as s:
        for i in range(100):  # over several segments: each roll remaps
            s.put_messages([Message("T", b"%d" % i * 40)])
        assert len(s.commitlog.files.segments) > 2
    recs = refreader.read_commitlog(tmp_path / "s" / "commitlog")
    assert [r["body"] for r in recs] == [b"first", b"general"] + [
        b"%d" % i * 40 for i in range(100)
    ]


def _vm_flags(path: Path) -> list[list[str]]:
    """The VmFlags of each of this process's mappings of the file at ``path`` (/proc/self/smaps,
    by inode: a file made under a temporary name shows that name there)."""
    ino = str(path.stat().st_ino)
    out, current = [], None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and ":" in fields[3]:
            current = fields[4]
        elif line.startswith("VmFlags:") and current == ino:
            out.append(fields[1:])
    return out


def test_the_writable_mappings_read_no_pages_ahead(tmp_path):
    """The CommitLog's, a ConsumeQueue's and the IndexFile's writable mappings are advised
    ``MADV_RANDOM`` (VmFlags ``rr``): a first store into a page of a file being filled faults in
    that page alone, not a readahead window of zeroed pages around it (a fresh store's first
    puts took 24 ms instead of 10, an IndexFile's scattered slots the most)."""
    with MessageStore(str(tmp_path / "s"), StoreConfig()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"x" * 100, keys="k")])
        s.index_service.write_pending()
        root = tmp_path / "s"
        paths = [
            next((root / "commitlog").iterdir()),
            next((root / "consumequeue" / "T" / "0").iterdir()),
            next((root / "index").iterdir()),
        ]
        for p in paths:
            flags = _vm_flags(p)
            assert flags, f"{p} is not mapped"
            assert any("rr" in f and "wr" in f for f in flags), (p, flags)


def test_every_index_write_of_a_store_goes_through_its_mapping(tmp_path, monkeypatch):
    """The IndexService owns the compiled writer and every write of its goes through it: the
    first record (indexed by ``IndexService.dispatch``), a message the general path puts (user
    properties) and single puts between; no slot table of Python's is built (20 MB zeroed, or
    read back whole at each turn of paths), and every key is found."""
    from rmqfs.engine.format import indexfile
    from rmqfs.engine.read import kernel

    written, tables = [], []
    real_call, real_table = kernel.IndexWriter.__call__, indexfile.IndexFile._slot_table

    def counting(self, *args):
        written.append(args[7])  # n
        return real_call(self, *args)

    def table(self):
        tables.append(self.path)
        return real_table(self)

    monkeypatch.setattr(kernel.IndexWriter, "__call__", counting)
    monkeypatch.setattr(indexfile.IndexFile, "_slot_table", table)
    with MessageStore(str(tmp_path / "s"), StoreConfig()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"first", keys="k0")])
        assert written  # (the first record, at CommitLog offset 0, is dispatched at once)
        for i in range(1, 7):
            props = {"p": "v"} if i % 2 else {}
            s.put_messages([Message("T", b"m%d" % i, keys=f"k{i}", properties=props)])
        s.index_service.write_pending()
        assert tables == []
        for i in range(7):
            assert len(s.query_by_key("T", f"k{i}")) == 1
