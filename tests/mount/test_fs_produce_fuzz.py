"""Property-based fuzzing of ``produce`` and ``produce.jsonl`` on a real mount
(docs/guarantees.md "Bad input").

Hypothesis writes random streams (random bytes, JSON of every type, valid messages, messages
that break one rule, over-long lines, empty lines) cut into random write() pieces, and checks
each write against the documented rule, observing only the mount:

* a write that succeeds stores exactly its complete non-empty lines (with the unfinished line
  earlier writes left in front), in order, each as the message its line describes;
* a write that fails stores nothing and fails with EINVAL or EMSGSIZE, never EIO;
* a failed write that continued an unfinished line makes every later write and the close()
  of that open file fail with the same errno (nothing refused is ever stored later);
* close() fails and stores nothing, or the unfinished last line is stored just after it
  returns (the daemon's RELEASE, which the kernel does not wait for), or refused there and
  recorded in refused.jsonl (a check only the store makes: a queueId the topic lacks);
* afterwards verify finds the store clean and the daemon logged no traceback.

One mount serves the whole module (examples are independent: each opens its own file).
"""

import base64
import errno
import json
import mmap
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import Mount, fuse
from rmqfs.engine.service.validation import RESERVED_PROPERTY_NAMES
from rmqfs.engine.tools.verify import verify_store

pytestmark = [fuse, pytest.mark.fuse]

MAX_MESSAGE_SIZE = 2048  # small, so over-long lines are cheap to write
MAX_JSONL_LINE = MAX_MESSAGE_SIZE * 4 // 3 + 64 * 1024
TOPIC = "Fuzz"
INPUT_ERRNOS = {errno.EINVAL, errno.EMSGSIZE}


class Fuzzed:
    """The module's mount and what has been read of its topic so far."""

    def __init__(self, root: Path):
        conf = root / "broker.conf"
        conf.write_text(f"maxMessageSize={MAX_MESSAGE_SIZE}\n")
        self.store = root / "store"
        self.mount = Mount(self.store, root / "mnt", config=conf)
        self.topic = self.mount.mnt / "topics" / TOPIC
        os.mkdir(self.topic)
        self.seen = 0  # messages.jsonl lines already checked

    def max_offset(self) -> int:
        return json.loads((self.mount.mnt / "status.json").read_text())["commitLogMaxOffset"]

    def refused_lines(self) -> list[bytes]:
        return (self.mount.mnt / "refused.jsonl").read_bytes().splitlines()

    def released(self, before: int, old: list[bytes], timeout: float = 10.0) -> bool:
        """After a close() that left an unfinished line: wait for the daemon's RELEASE, which
        the kernel sends without waiting for it; True when it stored the line (the CommitLog
        grew past ``before``), False when it refused it (a "close" line in refused.jsonl
        after ``old``, its lines before the close)."""
        import time

        refused = self.mount.mnt / "refused.jsonl"
        mark = old[-1] if old else None  # (a ring: the oldest go as new ones come)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.max_offset() > before:
                return True
            lines = refused.read_bytes().splitlines()
            if mark in lines:
                lines = lines[len(lines) - lines[::-1].index(mark) :]
            if any(json.loads(x)["op"] == "close" for x in lines):
                return False
            time.sleep(0.01)
        raise AssertionError("the last line was neither stored nor refused after close()")

    def new_messages(self) -> list[dict]:
        with open(self.topic / "messages.jsonl", "rb") as f:
            lines = f.read().splitlines()
        new = [json.loads(x) for x in lines[self.seen :]]
        self.seen = len(lines)
        return new


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    f = Fuzzed(tmp_path_factory.mktemp("produce_fuzz"))
    yield f
    try:
        f.mount.umount()
    finally:
        f.mount.cleanup()


# -- what is written ---------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=12)
_any_text = st.text(max_size=12)  # lone surrogates, control characters, separators too
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | _any_text,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(_any_text, c, max_size=3),
    max_leaves=6,
)


@st.composite
def _good_message(draw) -> dict:
    obj = {}
    if draw(st.booleans()):
        obj["body"] = draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=40))
    else:
        obj["bodyBase64"] = base64.b64encode(draw(st.binary(min_size=1, max_size=40))).decode()
    name = st.text(
        st.characters(
            codec="utf-8", exclude_categories=["Cc", "Cs", "Zs", "Zl", "Zp"], exclude_characters="|"
        ),
        min_size=1,
        max_size=8,
    )
    if draw(st.booleans()):
        obj["tags"] = draw(name)
    if draw(st.booleans()):
        obj["keys"] = draw(st.lists(name, max_size=3))
    if draw(st.booleans()):
        obj["properties"] = draw(
            st.dictionaries(
                name.filter(
                    lambda n: (
                        n not in RESERVED_PROPERTY_NAMES and not n.startswith("__RMQ.TRANSIENT.")
                    )
                ),
                name,
                max_size=3,
            )
        )
    if draw(st.booleans()):
        obj["queueId"] = draw(st.integers(0, 3))
    elif draw(st.booleans()):
        obj["shardingKey"] = draw(name)
    return obj


@st.composite
def _bad_message(draw) -> dict:
    """A good message with one field broken (one rule of engine/service/validation.py each)."""
    obj = draw(_good_message())
    field, value = draw(
        st.sampled_from(
            [
                ("queueId", True),
                ("queueId", 1.0),
                ("queueId", "1"),
                ("queueId", 99),
                ("queueId", -1),
                ("tags", "t\x02KEYS\x01evil"),
                ("tags", "a|b"),
                ("tags", " "),
                ("tags", 5),
                ("keys", [1]),
                ("keys", ["a b"]),
                ("keys", "k\x01"),
                ("keys", {"a": "b"}),
                ("properties", {"__CRC32#": "0000000000"}),
                ("properties", {"UNIQ_KEY": "x"}),
                ("properties", {"p": 1}),
                ("properties", {"p": "\x02"}),
                ("properties", ["p"]),
                ("properties", {"p": ""}),
                ("body", "\ud800"),
                ("body", ""),
                ("body", 7),
                ("bodyBase64", "***"),
                ("shardingKey", 1),
                ("tag", "misspelt"),
                ("body", "x" * (MAX_MESSAGE_SIZE + 1)),
            ]
        )
    )
    if field in ("body", "bodyBase64"):
        obj.pop("body", None)
        obj.pop("bodyBase64", None)
    obj[field] = value
    return obj


def _dumps(obj) -> bytes:
    return json.dumps(obj).encode()  # ensure_ascii: lone surrogates become \\ud800 escapes


_jsonl_line = st.one_of(
    _good_message().map(_dumps),
    _good_message().map(_dumps),
    _bad_message().map(_dumps),
    _json.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"  ", b"\r", b'{"body": "x", "body": "y"}', b"{", b'{"body": NaN}']),
)
_plain_line = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from(
        [
            b"",
            b"\r",
            b"x" * MAX_MESSAGE_SIZE,
            b"y" * (MAX_MESSAGE_SIZE + 1),
            b"z" * (3 * MAX_MESSAGE_SIZE),
        ]
    ),
)


@st.composite
def _stream(draw):
    jsonl = draw(st.booleans())
    lines = draw(st.lists(_jsonl_line if jsonl else _plain_line, min_size=1, max_size=12))
    data = b"\n".join(lines)
    if draw(st.booleans()):
        data += b"\n"
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=8))))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)]) if b > a]
    return jsonl, pieces


# -- what must be stored -----------------------------------------------------------------------


def _expected(line: bytes, jsonl: bool) -> dict:
    """The fields a stored line must show in messages.jsonl."""
    if not jsonl:
        return {"body": line}
    obj = json.loads(line)
    body = (
        base64.b64decode(obj["bodyBase64"])
        if obj.get("bodyBase64") is not None
        else obj["body"].encode()
    )
    out = {"body": body, "tags": obj.get("tags") or None}
    keys = obj.get("keys")
    out["keys"] = [k for k in keys.split(" ") if k] if isinstance(keys, str) else (keys or [])
    for k, v in (obj.get("properties") or {}).items():
        out[f"property {k}"] = v
    if obj.get("queueId") is not None:
        out["queueId"] = obj["queueId"]
    return out


def _shown(msg: dict, want: dict) -> dict:
    body = (
        msg["body"].encode()
        if msg.get("bodyEncoding") != "base64"
        else base64.b64decode(msg["body"])
    )
    out = {"body": body}
    for k in want:
        if k.startswith("property "):
            out[k] = msg["properties"].get(k[9:])
        elif k != "body":
            out[k] = msg[k]
    return out


def _complete(pending: bytes, piece: bytes, jsonl: bool) -> tuple[list[bytes], bytes]:
    data = pending + piece
    cut = data.rfind(b"\n")
    if cut < 0:
        return [], data
    lines = data[:cut].split(b"\n")
    keep = [x for x in lines if (x.strip(b" \t\r") if jsonl else x)]
    return keep, data[cut + 1 :]


@settings(
    max_examples=int(os.environ.get("RMQFS_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(_stream())
def test_every_write_stores_all_its_lines_or_fails_and_stores_none(fuzzed, stream):
    jsonl, pieces = stream
    path = fuzzed.topic / ("produce.jsonl" if jsonl else "produce")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    pending, refused = b"", 0
    stored: list[bytes] = []  # lines that must have been stored, in order
    try:
        for piece in pieces:
            before = fuzzed.max_offset()
            try:
                n = os.write(fd, piece)
            except OSError as exc:
                assert exc.errno in INPUT_ERRNOS, (exc, piece[:200])
                assert fuzzed.max_offset() == before, "a failed write stored something"
                event(
                    f"write refused: {errno.errorcode[exc.errno]}"
                    + (
                        " (line refused before)"
                        if refused
                        else " (continued a line)"
                        if pending
                        else ""
                    )
                )
                if refused:
                    assert exc.errno == refused
                elif pending:
                    refused = exc.errno  # the line it continued is refused whole
                pending = b""  # at a line start: the write's bytes are forgotten, no more
                continue
            assert not refused, "a write after a refused line was accepted"
            assert n == len(piece)
            lines, pending = _complete(pending, piece, jsonl)
            stored += lines
            assert (fuzzed.max_offset() > before) == bool(lines)
            event("write stored lines" if lines else "write buffered or skipped only")
    finally:
        before = fuzzed.max_offset()
        old_refused = fuzzed.refused_lines()
        try:
            os.close(fd)
        except OSError as exc:
            assert exc.errno in INPUT_ERRNOS, exc
            assert refused in (0, exc.errno)
            assert fuzzed.max_offset() == before
        else:
            assert not refused, "close() after a refused line succeeded"
            if pending and (pending.strip(b" \t\r") if jsonl else pending):
                if fuzzed.released(before, old_refused):
                    stored.append(pending)
                    event("last line stored at release")
                else:
                    event("last line refused at release")
    new = fuzzed.new_messages()
    assert len(new) == len(stored), (len(new), len(stored))
    for msg, line in zip(new, stored):
        want = _expected(line, jsonl)
        assert _shown(msg, want) == want, line


def test_a_write_larger_than_a_request_stores_the_requests_before_the_bad_one(fuzzed):
    """300,000 good lines and a bad one in one write(): the kernel sends requests of up to
    1 MiB; those before the bad line's request are stored, write() returns their byte count
    (a short write), the unfinished line at its end is refused with the failing request, and
    the caller's write of the rest fails with EINVAL."""
    fuzzed.new_messages()
    good = b"".join(b'{"body":"m%06d"}\n' % i for i in range(300_000))
    data = good + b'{"body": 1}\n'
    # From a page-aligned buffer: produce is direct_io, so the kernel cuts the write into
    # requests at page boundaries of the caller's buffer, and whether the failing request
    # starts inside a line (the case this test is about) depended on where the heap put
    # ``data``: once in CI it started on a line (18-byte lines), nothing was continued, and
    # the close below rightly succeeded.
    aligned = mmap.mmap(-1, len(data))
    aligned[:] = data
    fd = os.open(fuzzed.topic / "produce.jsonl", os.O_WRONLY | os.O_APPEND)
    try:
        n = os.write(fd, aligned)
        assert 0 < n < len(good)
        with pytest.raises(OSError) as info:
            os.write(fd, data[n:])
        assert info.value.errno == errno.EINVAL
    finally:
        with pytest.raises(OSError):
            os.close(fd)
    new = fuzzed.new_messages()
    complete = data[:n].count(b"\n")
    assert len(new) == complete and new[-1]["body"] == "m%06d" % (complete - 1)


def test_a_write_of_up_to_255_pages_is_one_request(fuzzed):
    """1,044,480 bytes (255 pages) with a bad last line fail whole at any buffer alignment:
    the kernel sent them as one request (docs/guarantees.md: keep writes at or under this size)."""
    size = 255 * 4096
    bad = b'{"body": 1}\n'
    good = b"".join(b'{"body":"m%06d"}\n' % i for i in range((size - len(bad)) // 19 - 1))
    pad = size - len(bad) - len(good)
    data = good + b'{"body":"' + b"x" * (pad - 12) + b'"}\n' + bad
    assert len(data) == size
    buf = bytearray(size + 8192)
    for shift in (0, 1, 2048, 4095):
        view = memoryview(buf)[shift : shift + size]
        view[:] = data
        before = fuzzed.max_offset()
        fd = os.open(fuzzed.topic / "produce.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            assert _fails(os.write, fd, view) == errno.EINVAL
        finally:
            os.close(fd)
        assert fuzzed.max_offset() == before, shift
    fuzzed.new_messages()


def _fails(fn, *args) -> int:
    with pytest.raises(OSError) as info:
        fn(*args)
    return info.value.errno


def _write(path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_the_reported_instances(fuzzed):
    """Issue 9 items 1-5 and 16 (input part) as a user would try them."""
    fuzzed.new_messages()
    t, mnt = fuzzed.topic, fuzzed.mount.mnt
    pj = t / "produce.jsonl"
    for line in [
        b'{"body":"x","properties":{"__CRC32#":"0000000000"}}\n',  # 1
        b'{"body":"b0","queueId":true}\n',  # 2
        b'{"body":"x","tags":"t\\u0002KEYS\\u0001evil"}\n',  # 3
        b'{"body":"\\ud800"}\n',
    ]:  # 5
        res = subprocess.run(
            ["bash", "-c", f"printf '%s' '{line.decode()}' >> '{pj}'"],
            capture_output=True,
            text=True,
        )
        assert res.returncode == 1 and "Invalid argument" in res.stderr, (line, res.stderr)
    assert not (fuzzed.store / "consumequeue" / TOPIC / "True").exists()
    # 5: the refused line leaves the open file clean: the next write on it works
    fd = os.open(pj, os.O_WRONLY | os.O_APPEND)
    try:
        assert _fails(os.write, fd, b'{"body":"\\ud800"}\n') == errno.EINVAL
        os.write(fd, b'{"body":"after-5"}\n')
    finally:
        os.close(fd)
    # 4: a line over maxMessageSize over several writes stores nothing, not even at close
    fd = os.open(t / "produce", os.O_WRONLY | os.O_APPEND)
    try:
        for _ in range(MAX_MESSAGE_SIZE // 600):
            os.write(fd, b"A" * 600)
        assert _fails(os.write, fd, b"A" * 600) == errno.EMSGSIZE
    finally:
        assert _fails(os.close, fd) == errno.EMSGSIZE
    res = subprocess.run(
        ["bash", "-c", f"head -c {MAX_MESSAGE_SIZE + 1} /dev/zero | tr '\\0' A >> '{t}/produce'"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "Message too long" in res.stderr
    # 16: empty lines store nothing, in both files
    _write(t / "produce", b"\n\nline\n\n")
    _write(pj, b'\n \r\n{"body":"json"}\n\n')
    assert [m["body"] for m in fuzzed.new_messages()] == ["after-5", "line", "json"]
    # 16: only canonical decimal names are lookups (ENOENT otherwise, never EIO)
    q0 = t / "0"
    _write(q0 / "produce", b"q0\n")
    assert (q0 / "by-offset" / "0").read_text().startswith("{")
    ms = json.loads((q0 / "by-offset" / "0").read_text())["storeTimestamp"]
    assert (q0 / "by-time" / str(ms)).exists()
    for bad in ["00", "+0", "0\n", "²", "٠", "0 ", "1e0", "9" * 30, "9" * 5000]:
        for d in ("by-offset", "by-time"):
            assert _fails(os.stat, q0 / d / bad) in (errno.ENOENT, errno.ENAMETOOLONG), (d, bad)
    for bad in [b"\xff", b"k\xc3", "\u00e9".encode("latin-1"), b"x" * 255]:  # not UTF-8
        assert _fails(os.stat, os.fsencode(t / "keys") + b"/" + bad) == errno.ENOENT
        assert _fails(os.stat, os.fsencode(mnt / "messages") + b"/" + bad) == errno.ENOENT
        assert _fails(os.stat, os.fsencode(mnt / "topics") + b"/" + bad) == errno.ENOENT
    assert (mnt / "view" / f"topic={TOPIC}" / "queue=0").is_dir()
    for bad in ["queue=00", "queue=²", "queue=٠", "queue=0\n"]:
        assert _fails(os.stat, mnt / "view" / f"topic={TOPIC}" / bad) == errno.ENOENT
    for bad in ["T\n", "G\n"]:
        assert _fails(os.mkdir, mnt / "topics" / bad) == errno.EINVAL
        assert _fails(os.mkdir, mnt / "groups" / bad) == errno.EINVAL
    fuzzed.new_messages()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.binary(min_size=1, max_size=300).filter(
        lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
    )
)
def test_any_lookup_name_is_found_or_enoent_never_eio(fuzzed, name):
    """Lookup directories take any name the kernel passes (bytes, not UTF-8, digits of other
    scripts, 255+ bytes): the answer is an entry or ENOENT (ENAMETOOLONG from the kernel),
    never EIO."""
    mnt = os.fsencode(fuzzed.mount.mnt)
    t = f"/topics/{TOPIC}".encode()
    for d in [
        t + b"/0/by-offset",
        t + b"/0/by-time",
        t + b"/keys",
        b"/messages",
        b"/topics",
        b"/groups",
        t,
        t + b"/0",
        f"/view/topic={TOPIC}".encode(),
        b"/view",
        b"/raw",
        b"/raw/commitlog",
        b"/raw/consumequeue/" + TOPIC.encode(),
    ]:
        try:
            os.stat(mnt + d + b"/" + name)
        except OSError as exc:
            assert exc.errno in (errno.ENOENT, errno.ENAMETOOLONG), (d, name, exc)


def test_zz_store_verifies_clean_and_no_traceback_after_fuzzing(fuzzed):
    fuzzed.mount.umount()
    res = verify_store(str(fuzzed.store))
    assert res.count("error") == 0, [str(p) for p in res.problems][:5]
    log = fuzzed.mount.log.read_text()
    assert "Traceback" not in log
    assert "refused" in log  # refused writes are logged, one line each
