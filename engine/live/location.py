"""Storage locations: a local directory or anything ``pyarrow.fs`` opens, for snapshots.

A location is a plain path (a local directory) or a URI that
``pyarrow.fs.FileSystem.from_uri`` accepts (``s3://bucket/prefix?endpoint_override=host:port&scheme=http``,
``gs://``, ``hdfs://``, ``file:///``); S3 credentials come from the standard AWS settings
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``~/.aws``), as pyarrow reads them. Here:
opening one, listing it, reading and summing its files, and printing it without secrets.
What is stored there (a snapshot) is :mod:`engine.live.snapshot`'s; moving snapshots is
:mod:`engine.live.objectstore`'s. pyarrow is imported when a location is used, not before.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode, urlsplit, urlunsplit

from ..errors import ObjectStoreError
from ..format.crc import CHUNK, crc32c

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: Files transferred at once by default (each holds up to FLUSH_EVERY + CHUNK bytes).
DEFAULT_WORKERS = 4
#: Seconds an S3 request may go without a byte moving before it fails (its attempt), by
#: default: the command line's and Spark's requests; the mount's ``-o remote_timeout=``.
REQUEST_TIMEOUT = 10.0
#: Attempts of one S3 request (AwsStandardS3RetryStrategy): a server that never answers costs
#: a command about ``S3_ATTEMPTS * timeout`` seconds per request, not pyarrow's default minutes.
S3_ATTEMPTS = 2
#: The query parameters of an ``s3://`` location rmqfs passes on to ``S3FileSystem``; a
#: location with others is opened by pyarrow's ``from_uri`` as it stands.
_S3_QUERY = ("endpoint_override", "scheme", "region")
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SECRETS = ("secret_key", "session_token", "access_key")


def is_uri(location: str) -> bool:
    """True for ``scheme://...``; a plain path (``./backup``, ``/srv/x``) is local."""
    return bool(_URI_RE.match(location))


def query_pairs(query: str) -> list[tuple[str, str]]:
    """The ``name=value`` pairs of a URI's query, each ``%XX`` decoded and a ``+`` kept as a
    ``+`` (RFC 3986: ``urllib.parse.parse_qsl`` decodes HTML forms, where ``+`` is a space,
    and turned half of AWS's secret keys, which hold ``+``, into wrong ones); empty values
    kept."""
    out = []
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            out.append((unquote(name), unquote(value)))
    return out


def _user_info(rest: str) -> tuple[str | None, str]:
    """``(user info, the rest)`` of what follows ``scheme://``: the user info is everything
    up to the last ``@`` before the query, whatever it holds (a secret key with an unencoded
    ``/``, ``#`` or ``?`` is not a well-formed URI, and is still hidden); ``(None, rest)``
    without one. A ``?`` after a ``/`` starts the query (an ``@`` there is the query's)."""
    at = rest.rfind("@")
    q = rest.find("?")
    if at >= 0 and 0 <= q < at and "/" in rest[:q]:
        at = rest.rfind("@", 0, q)
    if at < 0:
        return None, rest
    return rest[:at], rest[at + 1 :]


def redact(location: str) -> str:
    """``location`` fit to print: the values of credential parameters and the user info of
    ``s3://KEY:SECRET@bucket/...`` replaced by ``***``. The user info is everything between
    ``://`` and the last ``@`` before the query, whatever it holds (a secret key with an
    unencoded ``/`` or ``#`` is not a well-formed URI, and is still hidden)."""
    if not is_uri(location):
        return location
    scheme, _, rest = location.partition("://")
    user, rest = _user_info(rest)
    head, q, query = rest.partition("?")
    if user is not None:
        head = "***@" + head
    if q:
        pairs = [(k, "***" if k in _SECRETS else v) for k, v in query_pairs(query)]
        query = urlencode(pairs, safe=":/*")
    return f"{scheme}://{head}{q}{query}"


def _scrub(text: str, location: str) -> str:
    """``text`` (an error from pyarrow, which may quote the location) with ``location`` and
    its credentials replaced by :func:`redact`'s form."""
    shown = redact(location)
    if shown == location:
        return text
    text = text.replace(location, shown)
    info, rest = _user_info(location.partition("://")[2])
    secrets = []
    if info:
        secrets += [info, *info.split(":", 1)]
    secrets += [v for k, v in query_pairs(rest.partition("?")[2]) if k in _SECRETS]
    for s in sorted({x for x in secrets if len(x) >= 4}, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def with_credentials(location: str, access_key: str, secret_key: str) -> str:
    """An ``s3://`` location with ``access_key``/``secret_key`` as its user info (what
    ``S3Options::FromUri`` reads), for readers that cannot see the driver's environment
    (Spark's executors); other locations unchanged."""
    parts = urlsplit(location)
    if parts.scheme != "s3":
        return location
    host = parts.netloc.rpartition("@")[2]
    info = f"{quote(access_key, safe='')}:{quote(secret_key, safe='')}"
    return urlunsplit((parts.scheme, f"{info}@{host}", parts.path, parts.query, parts.fragment))


def explain(exc: BaseException) -> str:
    """The text of a filesystem error with what it most likely means: pyarrow's S3 errors
    name the AWS error code (``ACCESS_DENIED``, ``SIGNATURE_DOES_NOT_MATCH``,
    ``NETWORK_CONNECTION``, ...) but not its usual cause."""
    text = str(exc)
    if any(c in text for c in ("ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY")):
        return f"{text} (credentials refused: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    if "NETWORK_CONNECTION" in text:
        return f"{text} (server unreachable: check the endpoint and that the server runs)"
    return text


def open_location(location: str, timeout: float = REQUEST_TIMEOUT) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, base path)`` of a location: ``FileSystem.from_uri`` for a URI (for S3,
    base is ``bucket/prefix``), a ``LocalFileSystem`` and the absolute path for a plain path.

    An ``s3://`` location (with no query parameters but :data:`_S3_QUERY`'s) gets an
    ``S3FileSystem`` whose requests fail after ``timeout`` seconds without a byte moving
    (connecting: at most 5 s), tried :data:`S3_ATTEMPTS` times: a hung server fails a request
    in about ``S3_ATTEMPTS * timeout`` seconds (pyarrow's defaults wait about 100 s).

    Raises:
        ObjectStoreError: pyarrow does not accept the URI.
    """
    import pyarrow as pa
    import pyarrow.fs as pafs

    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    location = credentials_in_user_info(location)  # (keys in the query: in its user info)
    try:
        fs, path = pyarrow_filesystem(location)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise ObjectStoreError(
            f"{redact(location)}: not a storage location: {_scrub(str(exc), location)}"
        ) from None
    parts = urlsplit(location)
    query = dict(query_pairs(parts.query))
    if parts.scheme == "s3" and not set(query) - set(_S3_QUERY):
        kw: dict[str, Any] = {k: query[k] for k in _S3_QUERY if k in query}
        # the region from_uri found (the bucket's, asked of AWS when the URI names none)
        if "region" not in kw and getattr(fs, "region", None):
            kw["region"] = fs.region
        user = parts.netloc.rpartition("@")[0]
        if user:
            access, _, secret = user.partition(":")
            kw.update(access_key=unquote(access), secret_key=unquote(secret))
        fs = pafs.S3FileSystem(
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS),
            connect_timeout=min(timeout, 5.0),
            request_timeout=timeout,
            **kw,
        )
    return fs, path.rstrip("/")


def pyarrow_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """``pyarrow.fs.FileSystem.from_uri(uri)``: pyarrow's filesystem and path for a URI (for
    an AWS ``s3://`` URI without ``region=``, the bucket's region asked of AWS). Raises what
    pyarrow raises (ArrowException, ValueError, OSError)."""
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(uri)


def credentials_in_user_info(location: str) -> str:
    """``location`` with ``access_key=``/``secret_key=`` query parameters (which pyarrow's
    ``S3Options::FromUri`` refuses) moved into its user info (which it reads).

    Raises:
        ObjectStoreError: ``session_token=``, which a URI cannot carry to pyarrow (use
            ``AWS_SESSION_TOKEN``), or only one of the two keys.
    """
    parts = urlsplit(location)
    if parts.scheme != "s3" or not parts.query:
        return location
    pairs = query_pairs(parts.query)
    given = {k: v for k, v in pairs if k in _SECRETS}
    if not given:
        return location
    if "session_token" in given:
        raise ObjectStoreError(
            f"{redact(location)}: a session_token cannot be given in the URI; set "
            "AWS_SESSION_TOKEN (with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) instead"
        )
    if set(given) != {"access_key", "secret_key"}:
        raise ObjectStoreError(
            f"{redact(location)}: give both access_key= and secret_key= (or neither)"
        )
    rest = urlencode([(k, v) for k, v in pairs if k not in _SECRETS], safe=":/")
    bare = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    return with_credentials(bare, given["access_key"], given["secret_key"])


def is_local(fs: Any) -> bool:
    """True for a ``pyarrow.fs.LocalFileSystem``."""
    import pyarrow.fs as pafs

    return isinstance(fs, pafs.LocalFileSystem)


def join(base: str, rel: str) -> str:
    """The path of manifest name ``rel`` below ``base`` (pyarrow paths use ``/``)."""
    return f"{base}/{rel}" if base else rel


def read_small(fs: pafs.FileSystem, path: str, limit: int, where: str) -> bytes | None:
    """The bytes of a small file (a manifest), or None when there is none.

    Raises:
        ObjectStoreError: it cannot be read (server unreachable, credentials refused) or is
            over ``limit`` bytes; the message names ``path`` and ``where``.
    """
    name = path.rpartition("/")[2]
    try:
        with fs.open_input_stream(path, compression=None) as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ObjectStoreError(f"reading {name} of {where}: {explain(exc)}") from None
    if len(data) > limit:
        raise ObjectStoreError(f"{name} of {where}: over {limit} bytes")
    return data


def list_files(fs: pafs.FileSystem, base: str, where: str) -> dict[str, int]:
    """``{rel: size}`` of the files below ``base`` (``{}`` when there is nothing).

    Raises:
        ObjectStoreError: the listing failed.
    """
    import pyarrow.fs as pafs

    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise ObjectStoreError(f"listing {where}: {explain(exc)}") from None
    out = {}
    cut = len(base) + 1 if base else 0
    for info in infos:
        if info.type == pafs.FileType.File:
            out[info.path[cut:]] = info.size
    return out


def sum_object(fs: pafs.FileSystem, path: str, limit: int) -> tuple[int, int]:
    """``(bytes, crc32c)`` of the first ``limit`` bytes of a file, read in :data:`CHUNK`
    pieces (``bytes < limit``: the file is that long).

    Raises:
        FileNotFoundError: no such file. OSError: from the filesystem.
    """
    crc = n = 0
    with fs.open_input_stream(path, compression=None) as f:
        while n < limit:
            buf = f.read_buffer(min(CHUNK, limit - n))
            if not buf.size:
                break
            crc = crc32c(buf, crc)
            n += buf.size
    return n, crc
