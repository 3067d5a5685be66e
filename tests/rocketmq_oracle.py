"""RocketMQ 4.9.8's own store classes as a test oracle (tests/engine/test_rocketmq_reads_ours.py).

    python3 tests/rocketmq_oracle.py            # build when stale, print the java command line
    python3 tests/rocketmq_oracle.py run ARGS   # build when stale, then run OracleRead ARGS

Nothing of RocketMQ is in this repository. The sources of its store, common, remoting and logging
modules at tag ``rocketmq-all-4.9.8`` are extracted from a git mirror of apache/rocketmq
(``RMQFS_ROCKETMQ_MIRROR``, default /work/.mirror/apache+rocketmq/repo, the tool library's
``fetch``) into ~/.cache/rmqfs-oracle/rocketmq-4.9.8/src and compiled (the store module without its
DLedger package) with tests/java/oracle/shim/ (our code: fastjson's JSON on Jackson,
commons-validator's InetAddressValidator, the DLedger types the store names) into classes/;
tests/java/oracle/compile-stubs/ (type stand-ins of netty-common and lz4-java, which the read path
never uses) into stubs/, last on the class path; our harness tests/java/oracle/OracleRead.java into
harness/. Jars come from ~/.m2/repository, the newest version of each artifact. A build takes
about 3 s, and is redone only when the tag's commit, the jars or our Java sources change.

:class:`Missing` (exit status 2 from the command line) says what is absent: a JDK, the mirror or
its tag, a jar.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

TAG = "rocketmq-all-4.9.8"
MODULES = ["store", "common", "remoting", "logging"]
JAVA = Path(__file__).resolve().parent / "java" / "oracle"
MIRROR = Path(os.environ.get("RMQFS_ROCKETMQ_MIRROR", "/work/.mirror/apache+rocketmq/repo"))
CACHE = Path.home() / ".cache/rmqfs-oracle/rocketmq-4.9.8"
M2 = Path.home() / ".m2/repository"
JAVA_OPTS = [
    "--add-exports",
    "java.base/sun.nio.ch=ALL-UNNAMED",  # MappedFile's sun.nio.ch.DirectBuffer
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]


class Missing(Exception):
    """Something the oracle needs is not on this machine (the message says what)."""


def _version_key(v: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-]", v)]


def _versions(group: str, artifact: str) -> list[str]:
    """The versions of group:artifact in ~/.m2 that have their jar, newest first."""
    d = M2 / group.replace(".", "/") / artifact
    found = [
        p.parent.name
        for p in d.glob(f"*/{artifact}-*.jar")
        if p.name == f"{artifact}-{p.parent.name}.jar"
    ]
    return sorted(found, key=_version_key, reverse=True)


def _jar(group: str, artifact: str, version: str | None = None, prefix_of: str = "") -> Path:
    """The newest ~/.m2 jar of group:artifact (of ``version``; or one whose version is
    ``prefix_of`` or a prefix of it)."""
    for v in _versions(group, artifact):
        if version in (None, v) and (
            not prefix_of or prefix_of in (v,) or prefix_of.startswith(v + ".")
        ):
            return M2 / group.replace(".", "/") / artifact / v / f"{artifact}-{v}.jar"
    raise Missing(f"no jar of {group}:{artifact} {version or ''} in {M2}")


def _jars() -> list[Path]:
    jk = "com.fasterxml.jackson.core"
    databind = _jar(jk, "jackson-databind")
    v = databind.parent.name
    simple = _versions("org.slf4j", "slf4j-simple")
    slf = next((s for s in _versions("org.slf4j", "slf4j-api") if s in simple), None)
    if slf is None:
        raise Missing(f"no slf4j-api and slf4j-simple of one version in {M2}")
    return [
        _jar("org.apache.commons", "commons-lang3"),
        _jar("io.netty", "netty-buffer"),
        _jar("io.netty", "netty-transport"),
        _jar("net.java.dev.jna", "jna"),
        _jar("com.github.luben", "zstd-jni"),
        databind,
        _jar(jk, "jackson-core", v),
        _jar(jk, "jackson-annotations", prefix_of=v),
        _jar("org.slf4j", "slf4j-api", slf),
        _jar("org.slf4j", "slf4j-simple", slf),
    ]


def _javac(args: list[str]) -> None:
    r = subprocess.run(
        ["javac", "-nowarn", "-proc:none", "-encoding", "UTF-8", "-Xlint:none", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if r.returncode:
        raise RuntimeError(f"javac failed:\n{r.stdout[-4000:]}")


def _stamp(*parts: bytes | str | list) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
    return h.hexdigest()


def _sources(d: Path) -> list[Path]:
    return sorted(d.rglob("*.java"))


def command() -> list[str]:
    """Build what is stale and return the java command line that runs OracleRead (its own
    usage: ``[--start] [--body] STORE_COPY COMMITLOG_FILE_SIZE CQ_FILE_SIZE MAX_HASH_SLOT_NUM
    MAX_INDEX_NUM``). Raises :class:`Missing`, or RuntimeError when javac fails."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise Missing("javac/java not on PATH (a JDK 17 is needed)")
    if not MIRROR.is_dir():
        raise Missing(f"no git mirror of apache/rocketmq at {MIRROR} (set RMQFS_ROCKETMQ_MIRROR)")
    git = ["git", "--git-dir", str(MIRROR)]
    r = subprocess.run(
        [*git, "rev-parse", "--verify", TAG + "^{commit}"], capture_output=True, text=True
    )
    if r.returncode:
        raise Missing(f"tag {TAG} not in the mirror {MIRROR}")
    commit = r.stdout.strip()
    cp = _jars()
    ours = _sources(JAVA / "shim") + _sources(JAVA / "compile-stubs")
    key = _stamp(commit, [str(j) for j in cp], *[p.read_bytes() for p in ours])
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # one build at a time (test workers, CI, a user)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(git, commit, cp, key)


def _build(git: list[str], commit: str, cp: list[Path], key: str) -> list[str]:
    """:func:`command` under the cache's lock."""
    classes, stubs, harness = CACHE / "classes", CACHE / "stubs", CACHE / "harness"
    if not (CACHE / "stamp").is_file() or (CACHE / "stamp").read_text() != key:
        for d in (CACHE / "src", classes, stubs, harness):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        archive = subprocess.Popen([*git, "archive", commit, *MODULES], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(CACHE / "src")], stdin=archive.stdout, check=True)
        if archive.wait():
            raise RuntimeError("git archive failed")
        _javac(["-d", str(stubs), *map(str, _sources(JAVA / "compile-stubs"))])
        src = {m: CACHE / "src" / m / "src/main/java" for m in MODULES}
        store = [
            p for p in _sources(src["store"]) if "/rocketmq/store/dledger/" not in p.as_posix()
        ]
        _javac(
            [
                "--add-exports",
                "java.base/sun.nio.ch=ALL-UNNAMED",
                "-d",
                str(classes),
                "-cp",
                os.pathsep.join([str(stubs), *map(str, cp)]),
                "-sourcepath",
                os.pathsep.join(str(src[m]) for m in ("common", "remoting", "logging")),
                *map(str, store + _sources(JAVA / "shim")),
            ]
        )
        (CACHE / "stamp").write_text(key)
    runtime = os.pathsep.join([str(harness), str(classes), *map(str, cp), str(stubs)])
    main = JAVA / "OracleRead.java"
    harness_key = _stamp(key, main.read_bytes())
    if not (harness / "stamp").is_file() or (harness / "stamp").read_text() != harness_key:
        _javac(["-d", str(harness), "-cp", runtime, str(main)])
        (harness / "stamp").write_text(harness_key)
    return ["java", *JAVA_OPTS, "-cp", runtime, "OracleRead"]


def main() -> None:
    try:
        cmd = command()
    except Missing as exc:
        print(f"rocketmq oracle: {exc}", file=sys.stderr)
        sys.exit(2)
    if sys.argv[1:2] == ["run"]:
        os.execvp(cmd[0], cmd + sys.argv[2:])
    print(shlex.join(cmd))


if __name__ == "__main__":
    main()
