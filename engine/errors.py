"""Exceptions raised by the engine.

Every error the engine raises is a :class:`StoreError`. Corrupt bytes on disk raise
:class:`CorruptRecordError` (one clear type, like kafka-python's ``CorruptRecordException``);
invalid input from a caller raises one of the :class:`PutMessageError` subclasses, whose names
follow RocketMQ's ``PutMessageStatus`` (``MESSAGE_ILLEGAL``, ``PROPERTIES_SIZE_EXCEEDED``, ...).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence


class StoreError(Exception):
    """Base class of every error raised by :mod:`engine`.

    ``errno`` is the POSIX error number the filesystem layer should report for it;
    ``transient`` says the same read may work when asked again (a request to object storage
    that failed or timed out), so a reader reports it and keeps nothing of it (never noted as
    damage, never the end of a view).
    """

    errno = errno.EIO
    transient = False


class CorruptRecordError(StoreError):
    """Bytes on disk do not form a valid record (bad magic, size, CRC or truncated data).

    Attributes:
        offset: absolute offset (bytes) in the file sequence where the bad record starts,
            or ``None`` when unknown.
    """

    errno = errno.EIO

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message if offset is None else f"{message} (at offset {offset})")
        self.offset = offset


class PutMessageError(StoreError):
    """A message was refused before anything was written (nothing is stored)."""

    errno = errno.EINVAL


class MessageIllegalError(PutMessageError):
    """RocketMQ ``MESSAGE_ILLEGAL``: a message RocketMQ would refuse (a reserved property
    name, a control character in a tag, a queueId that is not an integer...; the rules are in
    :mod:`engine.service.validation`)."""

    errno = errno.EINVAL


class MessageTooLargeError(MessageIllegalError):
    """``MESSAGE_ILLEGAL`` for size: body larger than ``maxMessageSize``, a record longer than
    maxMessageSize + 64 KiB or than a CommitLog segment, a topic too long for its field."""

    errno = errno.EMSGSIZE


class PropertiesSizeExceededError(PutMessageError):
    """RocketMQ ``PROPERTIES_SIZE_EXCEEDED``: encoded properties longer than 32767 bytes."""

    errno = errno.EMSGSIZE


class InvalidNameError(PutMessageError):
    """A topic or group name breaks RocketMQ's naming rules (``TopicValidator``)."""

    errno = errno.EINVAL


class NoSuchTopicError(StoreError):
    """The topic (or queue) does not exist."""

    errno = errno.ENOENT


class PermissionDeniedError(StoreError):
    """The topic's ``perm`` does not allow the operation (e.g. perm without write bit)."""

    errno = errno.EACCES


class OffsetOutOfRangeError(StoreError):
    """A queue offset outside ``[minOffset, maxOffset]`` was given."""

    errno = errno.EINVAL


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only."""

    errno = errno.EROFS


class StoreLockedError(StoreError):
    """Another process holds the store's ``lock`` file.

    Attributes:
        holder: the pid of the holder when it is known (a broker's POSIX lock or an rmqfs
            mount's), else None. The message states the fact only; what to do about it
            depends on what the caller wanted (a mount can follow the writer read-only, an
            offline writer can go through the holder's mount), so callers add it.
    """

    errno = errno.EBUSY

    def __init__(self, message: str, holder: int | None = None):
        super().__init__(message)
        self.holder = holder


class FlushDiskTimeoutError(StoreError):
    """RocketMQ ``FLUSH_DISK_TIMEOUT``: under SYNC_FLUSH the records were appended but not
    confirmed on disk within ``syncFlushTimeout`` ms.

    The records stay in the CommitLog and become durable and visible with the next successful
    flush (as in RocketMQ, where the producer sees SendStatus.FLUSH_DISK_TIMEOUT).

    Attributes:
        results: the ``PutResult`` of each appended message.
    """

    errno = errno.ETIMEDOUT

    def __init__(self, message: str, results: Sequence | None = None):
        super().__init__(message)
        self.results: Sequence = results if results is not None else []


class SnapshotExistsError(StoreError):
    """``mkdir snapshots/<name>`` for a name that is taken (EEXIST)."""

    errno = errno.EEXIST


class NoSuchSnapshotError(StoreError):
    """A snapshot that does not exist (ENOENT)."""

    errno = errno.ENOENT


class SnapshotError(StoreError):
    """A snapshot cannot be made (the store is closed, a replica file is not a broker's), or
    one cannot be read: see :class:`ManifestError`."""


class SnapshotDescriptorsError(SnapshotError):
    """A snapshot would take so many of the process's file descriptors (one per store file)
    that too few would be left for producers, readers and the store's next files (EMFILE,
    with the counts and what to do: drop a snapshot, or raise ``ulimit -n``)."""

    errno = errno.EMFILE


class DescriptorsError(StoreError):
    """The process ran out of file descriptors (EMFILE) opening a store: a store holds one
    open descriptor per CommitLog, ConsumeQueue and IndexFile file, as a RocketMQ broker holds
    a ``FileChannel`` per ``MappedFile``, so a broker's store of a few hundred topics needs
    thousands. The message gives the limit and what to do (raise ``ulimit -n``; rmqfs's command
    line and mount raise the soft limit to the hard one themselves, as the JVM does)."""

    errno = errno.EMFILE


class ManifestError(SnapshotError, ValueError):
    """A snapshot's ``SNAPSHOT.json`` is not a manifest rmqfs reads: too large, not JSON,
    nested too deep, or a field of the wrong JSON type or range. The message names
    ``SNAPSHOT.json`` and the field (or the byte where the JSON breaks); every reader raises
    this one type (``engine.live.manifest.parse_manifest``). A ValueError too, for callers that
    catch what a parser raises."""


class ObjectStoreError(StoreError):
    """A snapshot cannot be moved to or read from a storage location (``rmqfs
    snapshot-upload``, ``snapshot-download``, ``snapshot-verify URI``, a mount of it): the
    server is unreachable, refused or did not answer in time, the location holds no manifest,
    or a file arrived damaged. The message names the file and the location. Transient: the
    next read asks the server again."""

    transient = True


class UnsupportedLayoutError(StoreError):
    """The store holds a layout rmqfs does not fully understand (a DLedger CommitLog, RocksDB
    ConsumeQueues or config, BatchConsumeQueues, LMQ queues, compaction logs): writing would
    make the broker misread it, so every writer refuses; where rmqfs would also read it wrong
    (a DLedger CommitLog), reading is refused too. The message names the entries and why. See
    :func:`engine.service.storetree.foreign_layouts`.
    """

    errno = errno.EOPNOTSUPP


class UnsafeStoreError(StoreError):
    """The store directory holds a symbolic link or a special file (FIFO, device, socket).

    The engine never reads or writes through a link, so such a store is refused as a whole;
    the message names the entries. See :mod:`engine.service.storetree`.
    """

    errno = errno.EACCES


class ConfigFileError(CorruptRecordError):
    """A ``config/*.json`` file (and its ``.bak``) cannot be used; the message names the file
    and the reason."""


class SystemTopicError(StoreError):
    """An admin operation refused on a RocketMQ system topic (deleting ``SCHEDULE_TOPIC_XXXX``,
    ``RMQ_SYS_*``, ...: ``AdminBrokerProcessor.deleteTopic`` with
    ``validateSystemTopicWhenUpdateTopic`` answers INVALID_PARAMETER, "conflict with system
    topic"). EPERM: the operation is not permitted on that object, whatever the input."""

    errno = errno.EPERM


class NoSuchGroupError(StoreError):
    """A consumer group the store does not hold."""

    errno = errno.ENOENT
