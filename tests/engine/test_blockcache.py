"""engine/live/blockcache.py: the bounded block cache the mount of a snapshot in object storage
reads through, judged against the bytes themselves with a fetch function standing in for the
range reads (tests/mount/test_mount_objectstore.py runs it against a real S3 server)."""

import os
import random
import threading
import time

import pytest

from rmqfs.engine.errors import ObjectStoreError
from rmqfs.engine.live.blockcache import MIN_BLOCK, BlockCache

BLOCK = MIN_BLOCK  # 64 KiB


class Remote:
    """Files as bytes; counts the range reads; can fail or be slowed."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.calls: list[tuple[str, int, int]] = []
        self.fail: Exception | None = None
        self.delay = 0.0
        self.lock = threading.Lock()

    def fetch(self, rel: str, offset: int, length: int) -> bytes:
        with self.lock:
            self.calls.append((rel, offset, length))
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return self.files[rel][offset : offset + length]


def on_disk(directory) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def test_reads_are_the_bytes_and_the_cache_stays_within_its_bound(tmp_path):
    rnd = random.Random(7)
    files = {f"commitlog/{i:020d}": rnd.randbytes(5 * BLOCK + 1000) for i in range(3)}
    remote = Remote(files)
    cache = BlockCache(remote.fetch, str(tmp_path / "c"), 4 * BLOCK, block=BLOCK)
    assert cache.block == BLOCK
    size = 5 * BLOCK + 1000
    for _ in range(300):
        rel = rnd.choice(list(files))
        off = rnd.randrange(size + 10)
        n = rnd.randrange(1, 3 * BLOCK)
        assert cache.read(rel, size, off, n) == files[rel][off : off + n]
        assert on_disk(tmp_path / "c") <= 4 * BLOCK
        assert cache.cached_bytes <= 4 * BLOCK
    assert cache.stats.evicted > 0 and cache.stats.hits > 0
    # every range read is one whole block (the last one shorter)
    assert all(o % BLOCK == 0 and (n == BLOCK or o + n == size) for _, o, n in remote.calls)
    cache.close()
    assert os.listdir(tmp_path / "c") == []


def test_a_hot_block_is_read_from_disk_not_fetched_again(tmp_path):
    data = bytes(range(256)) * 1024
    remote = Remote({"f": data})
    cache = BlockCache(remote.fetch, str(tmp_path), 8 * BLOCK, block=BLOCK)
    for off in range(0, BLOCK, 4096):
        assert cache.read("f", len(data), off, 4096) == data[off : off + 4096]
    assert remote.calls == [("f", 0, BLOCK)]


def test_readers_of_one_block_wait_for_one_fetch(tmp_path):
    data = os.urandom(2 * BLOCK)
    remote = Remote({"f": data})
    remote.delay = 0.3
    cache = BlockCache(remote.fetch, str(tmp_path), 8 * BLOCK, block=BLOCK)
    got = []

    def reader(off):
        got.append(cache.read("f", len(data), off, 100) == data[off : off + 100])

    threads = [threading.Thread(target=reader, args=(i * 100,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [True] * 8
    assert remote.calls == [("f", 0, BLOCK)]


def test_a_failed_fetch_fails_every_waiting_reader_and_caches_nothing(tmp_path):
    data = os.urandom(BLOCK)
    remote = Remote({"f": data})
    remote.fail = ObjectStoreError("reading f of s3://b/x: server unreachable")
    remote.delay = 0.2
    cache = BlockCache(remote.fetch, str(tmp_path), 4 * BLOCK, block=BLOCK)
    errors = []

    def reader():
        try:
            cache.read("f", len(data), 0, 10)
        except ObjectStoreError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == ["reading f of s3://b/x: server unreachable"] * 4
    assert len(remote.calls) == 1
    assert cache.cached_bytes == 0 and os.listdir(tmp_path) == []
    remote.fail = None  # the server is back: the next read fetches again
    remote.delay = 0
    assert cache.read("f", len(data), 0, 10) == data[:10]
    assert len(remote.calls) == 2


def test_an_object_shorter_than_its_manifest_is_an_error_never_zeros(tmp_path):
    remote = Remote({"f": b"x" * 1000})
    cache = BlockCache(remote.fetch, str(tmp_path), 4 * BLOCK, block=BLOCK)
    with pytest.raises(ObjectStoreError, match=r"^f: 4096 bytes at 0 asked, 1000 came back"):
        cache.read("f", 4096, 0, 10)
    assert cache.cached_bytes == 0


def test_the_zero_tail_is_never_fetched(tmp_path):
    size = 3 * BLOCK
    data = os.urandom(BLOCK + 100) + bytes(size - BLOCK - 100)
    remote = Remote({"seg": data})
    cache = BlockCache(remote.fetch, str(tmp_path), 4 * BLOCK, block=BLOCK)
    assert cache.read("seg", size, 0, size, data_end=BLOCK + 100) == data
    assert remote.calls == [("seg", 0, BLOCK), ("seg", BLOCK, 100)]
    assert cache.read("seg", size, size - 10, 100, data_end=BLOCK + 100) == bytes(10)
    assert cache.read("seg", size, size, 100) == b""
    assert on_disk(tmp_path) == BLOCK + 100


def test_a_small_capacity_makes_small_blocks_and_too_small_is_refused(tmp_path):
    assert BlockCache(Remote({}).fetch, str(tmp_path), 1 << 20).block == 512 << 10
    with pytest.raises(ValueError):
        BlockCache(Remote({}).fetch, str(tmp_path), MIN_BLOCK)


def test_a_view_is_the_block_without_a_copy_and_outlives_its_eviction(tmp_path):
    """``BlockCache.view``: the cached block that holds an offset, mapped (what the decoders
    read many records of one block through), fetched once, and still readable once evicted."""
    data = random.Random(3).randbytes(3 * BLOCK + 500)
    remote = Remote({"f": data})
    cache = BlockCache(remote.fetch, str(tmp_path / "c"), 2 * BLOCK, block=BLOCK)
    m, start = cache.view("f", len(data), BLOCK + 7, data_end=3 * BLOCK + 100)
    assert start == BLOCK and m[:] == data[BLOCK : 2 * BLOCK]
    again, _ = cache.view("f", len(data), 2 * BLOCK - 1)
    assert again[:] == m[:] and len(remote.calls) == 1
    # the last block holds its data only, not the zeros after data_end
    last, start = cache.view("f", len(data), 3 * BLOCK, data_end=3 * BLOCK + 100)
    assert start == 3 * BLOCK and last[:] == data[3 * BLOCK : 3 * BLOCK + 100]
    assert cache.view("f", len(data), 3 * BLOCK + 100, data_end=3 * BLOCK + 100) is None
    cache.read("f", len(data), 0, 10)  # evicts the first block viewed
    assert cache.stats.evicted >= 1 and m[:] == data[BLOCK : 2 * BLOCK]
    cache.close()


def test_peers_share_their_blocks_so_a_block_is_fetched_once(tmp_path):
    """A mount's daemon and render workers keep a cache each; on a miss a cache reads a peer's
    file of the block (same name in every cache) instead of fetching it again, keeps nothing
    of it, and a peer's eviction does not spoil what was opened."""
    data = random.Random(5).randbytes(4 * BLOCK)
    remote = Remote({"commitlog/0": data})
    a_dir, b_dir = str(tmp_path / "a"), str(tmp_path / "b")
    a = BlockCache(remote.fetch, a_dir, 2 * BLOCK, block=BLOCK, peers=lambda: [b_dir])
    b = BlockCache(remote.fetch, b_dir, 2 * BLOCK, block=BLOCK, peers=lambda: [a_dir])
    assert a.read("commitlog/0", len(data), 10, 100) == data[10:110]
    assert len(remote.calls) == 1
    m, start = b.view("commitlog/0", len(data), 20)
    assert start == 0 and m[:] == data[:BLOCK] and len(remote.calls) == 1
    assert b.read("commitlog/0", len(data), BLOCK - 5, 10) == data[BLOCK - 5 : BLOCK + 5]
    assert len(remote.calls) == 2  # the second block: no peer held it
    assert on_disk(b_dir) == BLOCK  # the peer's block was not copied
    a.read("commitlog/0", len(data), 2 * BLOCK, 1)
    a.read("commitlog/0", len(data), 3 * BLOCK, 1)  # evicts a's first block
    assert m[:] == data[:BLOCK]
    a.close()
    b.close()
