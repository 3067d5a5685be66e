"""RocketMQ's own store classes as a test oracle (tests/engine/test_rocketmq_reads_ours.py), in
two versions: 4.9.8 (the default) and 5.3.3.

    python3 tests/rocketmq_oracle.py [VERSION]            # build when stale, print the java command
    python3 tests/rocketmq_oracle.py [VERSION] run ARGS   # build when stale, then run the harness

Nothing of RocketMQ is in this repository. The sources of its modules at tag
``rocketmq-all-VERSION`` are extracted from a git mirror of apache/rocketmq
(``RMQFS_ROCKETMQ_MIRROR``, default /work/.mirror/apache+rocketmq/repo, the tool library's
``fetch``) into ~/.cache/rmqfs-oracle/rocketmq-VERSION/STAMP/src (a directory a build, named by
what it is built from, never rebuilt in place; one no run has used for a week is deleted by
the next), the files our stand-ins replace are
deleted from that copy, and it is compiled with our shims (tests/java/oracle/shim/, shared, and
shim-5/ for 5.x) into classes/; tests/java/oracle/compile-stubs/ (type stand-ins of netty-common
and lz4-java, which the read path never uses) into stubs/, last on the class path; our harness
(tests/java/oracle/Oracle.java, what both versions share, with OracleRead.java, or
OracleRead5.java for 5.x) into harness/. Jars come from
~/.m2/repository, the newest version of each artifact.

4.9.8: the store, common, remoting and logging modules; all of the store module but its DLedger
package (shim/: fastjson's JSON on Jackson, commons-validator's InetAddressValidator, the DLedger
types the store names).

5.3.3: the store, common and remoting modules; DefaultMessageStore and what it names (javac's
``-sourcepath``: the RocksDB ConsumeQueue, the broker's remoting client and most of netty stay
out), with its RocksDBMessageStore and kv/MessageFetcher replaced by stand-ins that throw, and
shim-5/ for what ~/.m2 lacks: the relocated slf4j (org.apache.rocketmq.logging.org.slf4j) on
slf4j, netty's PlatformDependent.freeDirectBuffer, the few rocksdbjni types the file-based store's
signatures and MessageStoreConfig's defaults name, fastjson2's JSONField, Conversant's
DisruptorBlockingQueue. The harness runs the default storeType (file ConsumeQueue) without the
timer store.

A build takes a few seconds, and is redone only when the tag's commit, the jars, our Java sources
or the build recipe change. :class:`Missing` (exit status 2 from the command line) says what is
absent: a JDK, the mirror or its tag, a jar.
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

JAVA = Path(__file__).resolve().parent / "java" / "oracle"
MIRROR = Path(os.environ.get("RMQFS_ROCKETMQ_MIRROR", "/work/.mirror/apache+rocketmq/repo"))
CACHE_ROOT = Path.home() / ".cache/rmqfs-oracle"
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
STORE_JAVA = "store/src/main/java/org/apache/rocketmq/store"


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


def _path(group: str, artifact: str, version: str) -> Path:
    return M2 / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"


def _jar(group: str, artifact: str, version: str | None = None, prefix_of: str = "") -> Path:
    """The newest ~/.m2 jar of group:artifact (of ``version``; or one whose version is
    ``prefix_of`` or a prefix of it)."""
    for v in _versions(group, artifact):
        if version in (None, v) and (
            not prefix_of or prefix_of in (v,) or prefix_of.startswith(v + ".")
        ):
            return _path(group, artifact, v)
    raise Missing(f"no jar of {group}:{artifact} {version or ''} in {M2}")


def _aligned(group: str, artifacts: list[str]) -> list[Path]:
    """The jars of ``artifacts`` (of one group) at the newest version all of them have."""
    common = set(_versions(group, artifacts[0]))
    for a in artifacts[1:]:
        common &= set(_versions(group, a))
    if not common:
        raise Missing(f"no one version of {group}:{{{','.join(artifacts)}}} in {M2}")
    v = max(common, key=_version_key)
    return [_path(group, a, v) for a in artifacts]


def _common_jars() -> list[Path]:
    """What both versions load: commons-lang3, netty's buffer and transport, JNA, zstd-jni,
    Jackson (under our fastjson shim) and slf4j with its simple binding."""
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


def _jars5() -> list[Path]:
    """5.x also compiles against guava, commons-collections 3, jsr305's annotations and
    OpenTelemetry's metrics API and SDK (the store's metrics manager); its load and read path
    loads guava of these."""
    return [
        *_common_jars(),
        _jar("com.google.guava", "guava"),
        _jar("commons-collections", "commons-collections"),
        _jar("com.google.code.findbugs", "jsr305"),
        *_aligned(
            "io.opentelemetry",
            ["opentelemetry-api", "opentelemetry-context", "opentelemetry-sdk-metrics"],
        ),
    ]


@dataclass(frozen=True)
class Recipe:
    """How one RocketMQ version is built (paths relative to the extracted tag)."""

    tag: str
    modules: tuple[str, ...]  #: extracted from the tag
    drop: tuple[str, ...]  #: deleted from the extracted copy: our stand-ins replace them
    sourcepath: tuple[str, ...]  #: modules javac takes what it needs from
    roots: tuple[str, ...]  #: compiled, with what they name; a directory: all its sources
    shims: tuple[str, ...]  #: under tests/java/oracle, compiled with the roots
    harness: str  #: the main class (tests/java/oracle/HARNESS.java)
    jars: Callable[[], list[Path]]


RECIPES: dict[str, Recipe] = {
    "4.9.8": Recipe(
        tag="rocketmq-all-4.9.8",
        modules=("store", "common", "remoting", "logging"),
        drop=(f"{STORE_JAVA}/dledger",),
        sourcepath=("common", "remoting", "logging"),
        roots=("store/src/main/java",),
        shims=("shim",),
        harness="OracleRead",
        jars=_common_jars,
    ),
    "5.3.3": Recipe(
        tag="rocketmq-all-5.3.3",
        modules=("store", "common", "remoting"),
        drop=(
            f"{STORE_JAVA}/dledger",
            f"{STORE_JAVA}/RocksDBMessageStore.java",
            f"{STORE_JAVA}/kv/MessageFetcher.java",
        ),
        sourcepath=("common", "remoting", "store"),
        roots=(f"{STORE_JAVA}/DefaultMessageStore.java",),
        shims=("shim", "shim-5"),
        harness="OracleRead5",
        jars=_jars5,
    ),
}
VERSIONS = tuple(RECIPES)
DEFAULT = "4.9.8"


#: javac's flags for every compile (part of a build's key)
JAVAC = ["javac", "-nowarn", "-proc:none", "-encoding", "UTF-8", "-Xlint:none"]


def _javac(args: list[str]) -> None:
    r = subprocess.run(
        [*JAVAC, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if r.returncode:
        raise RuntimeError(f"javac failed:\n{r.stdout[-4000:]}")


def _stamp(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
    return h.hexdigest()


def _sources(d: Path) -> list[Path]:
    return sorted(d.rglob("*.java"))


def _harness_sources(recipe: Recipe) -> list[Path]:
    """The harness of ``recipe``: what both versions share, and the version's own side."""
    return [JAVA / "Oracle.java", JAVA / f"{recipe.harness}.java"]


def cache(version: str = DEFAULT) -> Path:
    """Where ``version``'s builds go (one directory each, named by its stamp)."""
    return CACHE_ROOT / f"rocketmq-{version}"


def command(version: str = DEFAULT) -> list[str]:
    """Build what is stale and return the java command line that runs the harness of
    ``version`` (one of :data:`VERSIONS`; its usage: ``[--start] [--body] STORE_COPY
    COMMITLOG_FILE_SIZE CQ_FILE_SIZE MAX_HASH_SLOT_NUM MAX_INDEX_NUM``). Raises :class:`Missing`,
    or RuntimeError when javac fails."""
    recipe = RECIPES[version]
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise Missing("javac/java not on PATH (a JDK 17 is needed)")
    if not MIRROR.is_dir():
        raise Missing(f"no git mirror of apache/rocketmq at {MIRROR} (set RMQFS_ROCKETMQ_MIRROR)")
    git = ["git", "--git-dir", str(MIRROR)]
    r = subprocess.run(
        [*git, "rev-parse", "--verify", recipe.tag + "^{commit}"], capture_output=True, text=True
    )
    if r.returncode:
        raise Missing(f"tag {recipe.tag} not in the mirror {MIRROR}")
    commit = r.stdout.strip()
    cp = recipe.jars()
    ours = [p for d in (*recipe.shims, "compile-stubs") for p in _sources(JAVA / d)]
    recipe_key = (recipe.modules, recipe.drop, recipe.sourcepath, recipe.roots, recipe.shims)
    ours += _harness_sources(recipe)
    jdk = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout
    # how it is built: this file (its recipes, flags) and the JDK (a newer one's classes do not
    # load in an older one)
    build = (Path(__file__).read_bytes(), jdk)
    key = _stamp(commit, recipe_key, build, [str(j) for j in cp], *[p.read_bytes() for p in ours])
    # one directory a build, never rebuilt in place: a harness another process runs (a test
    # worker, an older checkout) keeps its classes while a newer build goes beside it
    where = cache(version) / key[:16]
    where.mkdir(parents=True, exist_ok=True)
    with open(where / ".lock", "w") as lock:  # one build at a time (test workers, CI, a user)
        fcntl.flock(lock, fcntl.LOCK_EX)
        cmd = _build(recipe, where, git, commit, cp, key)
        (where / "used").touch()
    _prune(where)
    return cmd


#: a build directory no :func:`command` has returned for this long (seconds) is deleted
PRUNE_AFTER = 7 * 86400


def _prune(keep: Path) -> None:
    """Delete the other builds of ``keep``'s version that no :func:`command` has returned for
    :data:`PRUNE_AFTER` seconds (an older checkout's, a former JDK's): every change of the
    recipe or our Java sources makes a new directory beside the old ones. One being built (its
    lock held) is left alone, and a harness run started from one is long over by then."""
    for d in keep.parent.iterdir():
        if d == keep or not d.is_dir() or d.is_symlink():
            continue
        try:
            used = max((d / n).stat().st_mtime for n in ("used", ".lock") if (d / n).exists())
        except (ValueError, OSError):  # neither: a directory of something else, or gone
            continue
        if time.time() - used < PRUNE_AFTER:
            continue
        with open(d / ".lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built now
            shutil.rmtree(d, ignore_errors=True)


def _build(
    recipe: Recipe, where: Path, git: list[str], commit: str, cp: list[Path], key: str
) -> list[str]:
    """:func:`command` under the cache's lock."""
    src, classes, stubs, harness = (where / d for d in ("src", "classes", "stubs", "harness"))
    shims = [p for d in recipe.shims for p in _sources(JAVA / d)]
    if not (where / "stamp").is_file() or (where / "stamp").read_text() != key:
        for d in (src, classes, stubs, harness):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        archive = subprocess.Popen(
            [*git, "archive", commit, *recipe.modules], stdout=subprocess.PIPE
        )
        assert archive.stdout is not None
        with archive.stdout:  # closed here too, so git never waits on a tar that failed
            subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
        if archive.wait():
            raise RuntimeError("git archive failed")
        for rel in recipe.drop:
            p = src / rel
            if not p.exists():
                raise RuntimeError(f"{rel} is not in {recipe.tag}: the recipe needs updating")
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        _javac(["-d", str(stubs), *map(str, _sources(JAVA / "compile-stubs"))])
        roots = [
            p
            for r in recipe.roots
            for p in ([src / r] if r.endswith(".java") else _sources(src / r))
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
                os.pathsep.join(str(src / m / "src/main/java") for m in recipe.sourcepath),
                *map(str, roots + shims),
            ]
        )
        (where / "stamp").write_text(key)
    runtime = os.pathsep.join([str(harness), str(classes), *map(str, cp), str(stubs)])
    if not (harness / "stamp").is_file():
        _javac(["-d", str(harness), "-cp", runtime, *map(str, _harness_sources(recipe))])
        (harness / "stamp").write_text(key)
    return ["java", *JAVA_OPTS, "-cp", runtime, recipe.harness]


def main() -> None:
    args = sys.argv[1:]
    version = args.pop(0) if args[:1] and args[0] in RECIPES else DEFAULT
    try:
        cmd = command(version)
    except Missing as exc:
        print(f"rocketmq oracle {version}: {exc}", file=sys.stderr)
        sys.exit(2)
    if args[:1] == ["run"]:
        os.execvp(cmd[0], cmd + args[1:])
    print(shlex.join(cmd))


if __name__ == "__main__":
    main()
