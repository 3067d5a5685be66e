"""getMessage: pull messages from a ConsumeQueue with RocketMQ's statuses and corrections.

Follows ``DefaultMessageStore.getMessage`` (store 5.3.3; docs/engine.md "getMessage"):

* no such topic/queue: ``NO_MATCHED_LOGIC_QUEUE``, next offset 0 (a queue of a known topic
  that never had a message is ``NO_MESSAGE_IN_QUEUE``, as RocketMQ creates it on demand);
* ``maxOffset == 0``: ``NO_MESSAGE_IN_QUEUE``, next 0;
* ``offset < minOffset``: ``OFFSET_TOO_SMALL``, next ``minOffset``;
* ``offset == maxOffset``: ``OFFSET_OVERFLOW_ONE``, next ``offset``;
* ``offset > maxOffset``: ``OFFSET_OVERFLOW_BADLY``, next ``maxOffset``;
* otherwise units are scanned from ``offset`` (one ConsumeQueue file at most,
  ``travelCqFileNumWhenGetMessage = 1``; a window of ``max(maxFilterMessageSize,
  maxMsgNums * 20)`` bytes of units) and the status starts as ``NO_MATCHED_MESSAGE``: a unit
  whose tagsCode the subscription does not contain is skipped, a unit whose record is below the
  CommitLog's min offset gives ``MESSAGE_WAS_REMOVING`` (and skips to the next CommitLog
  file), a hit gives ``FOUND``; a missing ConsumeQueue file gives ``OFFSET_FOUND_NULL`` with
  next = the start of the next ConsumeQueue file. ``next_begin_offset`` is one past the last
  unit scanned. The batch stops at ``maxMsgNums`` or at the broker's transfer limits
  (``isTheBatchFull``: 32 messages / 256 KiB when the record is "in memory", i.e. within
  ``accessMessageInMemoryMaxRatio`` % of RAM from the CommitLog end, else 8 / 64 KiB).

A record whose body fails its CRC, or that is not its unit's record (QUEUEID or QUEUEOFFSET not
the unit's: ``check_unit_record``), is never returned (``MessageDecoder.decode(...,
checkCRC=true)`` drops it and ``decodesBatch`` stops there): the batch ends before it, with
``next_begin_offset`` at it, so the next call starts there; a call whose first message it is
raises CorruptRecordError. Either way the queue is noted as damaged (``store.note_damage``,
status.json ``damagedQueues``); a consumer never skips it silently.

Offsets are queue offsets (units), sizes bytes. The slave-only ``nextOffsetCorrection`` case
does not apply (this store is always a master), and ``OFFSET_RESET`` is set only by a broker.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from ..format.consumequeue import BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE, UNIT
from ..format.innerbatch import unit_message
from ..format.javahash import java_string_hash
from ..format.message import MessageRecord, check_body_crc

if TYPE_CHECKING:
    from ..store import MessageStore

SUB_ALL = "*"  # SubscriptionData.SUB_ALL


class GetMessageStatus(enum.Enum):
    """``org.apache.rocketmq.store.GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"


@dataclass
class GetMessageResult:
    """``GetMessageResult``: what one getMessage call found.

    Attributes:
        status: a :class:`GetMessageStatus`.
        next_begin_offset: the queue offset to pull from next (after RocketMQ's correction).
        min_offset, max_offset: the queue's bounds at the time of the call (units).
        messages: the records found, in queue order.
        queue_offsets: the queue offset of each record of ``messages``.
        buffer_total_size: bytes of the records found.
        suggest_pulling_from_slave: the reads went further back than the memory ratio.
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int = 0
    max_offset: int = 0
    messages: list[MessageRecord] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        """Number of messages found."""
        return len(self.messages)


def subscription_tags(expression: str | None) -> frozenset[str] | None:
    """The tags of a subscription (``FilterAPI.buildSubscriptionData``: its tagsSet).

    ``"TagA || TagB"`` gives {TagA, TagB}; None, ``""`` and ``"*"`` give None (every message
    matches). Blank parts are ignored: ``"||"`` gives an empty set (no message matches).
    The one parser of a subscription expression (getMessage, ``rmqfs printMsg -s``).
    """
    if expression is None:
        return None
    expression = expression.strip()
    if not expression or expression == SUB_ALL:
        return None
    return frozenset(t.strip() for t in expression.split("||") if t.strip())


def parse_subscription(expression: str | None) -> frozenset[int] | None:
    """The tagsCode set of a subscription (``FilterAPI.buildSubscriptionData``: its codeSet):
    the Java hashes of :func:`subscription_tags`; None when every message matches."""
    tags = subscription_tags(expression)
    return None if tags is None else frozenset(java_string_hash(t) for t in tags)


def _matches(codes: frozenset[int] | None, tags_code: int) -> bool:
    """``DefaultMessageFilter.isMatchedByConsumeQueue``: codeSet contains tagsCode.intValue()."""
    if codes is None:
        return True
    v = tags_code & 0xFFFFFFFF
    return (v - (1 << 32) if v & 0x80000000 else v) in codes


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def get_messages(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    codes: frozenset[int] | None,
) -> GetMessageResult:
    """The getMessage algorithm over a :class:`engine.store.MessageStore` (see module doc)."""
    cq = store.consume_queue(topic, queue_id)
    if cq is None:
        # RocketMQ's findConsumeQueue creates an empty queue on demand, so a queue of a known
        # topic reads as NO_MESSAGE_IN_QUEUE; an unknown topic or queue id as
        # NO_MATCHED_LOGIC_QUEUE.
        known = store.has_topic(topic) and queue_id in store.queue_ids(topic)
        return GetMessageResult(
            GetMessageStatus.NO_MESSAGE_IN_QUEUE
            if known
            else GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            0,
        )
    min_offset, max_offset = cq.min_offset, cq.max_offset
    res = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    if max_offset == 0:
        res.status, res.next_begin_offset = GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
        return res
    if offset < min_offset:
        res.status, res.next_begin_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
        return res
    if offset == max_offset:
        res.status, res.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        return res
    if offset > max_offset:
        res.status, res.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset
        return res

    cfg = store.config
    cl = store.commitlog
    units_per_file = cq.units_per_file
    file_end = offset - offset % units_per_file + units_per_file
    window = max(cfg.max_filter_message_size, max_msg_nums * CQ_STORE_UNIT_SIZE)
    count = min(max_offset, file_end, offset + -(-window // CQ_STORE_UNIT_SIZE)) - offset
    raw = cq.read_units(offset, count)
    if not raw:
        res.status = GetMessageStatus.OFFSET_FOUND_NULL
        res.next_begin_offset = file_end  # rollNextFile
        return res
    max_phy, min_phy = cl.max_offset, cl.min_offset
    memory = _memory_bytes() * cfg.access_message_in_memory_max_ratio // 100
    next_phy_file_start = None
    max_pulled_phy = 0
    scanned = 0
    total = 0
    for off_py, size_py, tags_code in UNIT.iter_unpack(raw):
        in_disk = (max_phy - off_py) > memory
        n = len(res.messages)
        if total and n:
            if n + 1 > max_msg_nums:
                break
            if in_disk:
                if (
                    total + size_py > cfg.max_transfer_bytes_on_message_in_disk
                    or n > cfg.max_transfer_count_on_message_in_disk - 1
                ):
                    break
            elif (
                total + size_py > cfg.max_transfer_bytes_on_message_in_memory
                or n > cfg.max_transfer_count_on_message_in_memory - 1
            ):
                break
        qoff = offset + scanned
        scanned += 1
        if size_py == BLANK_UNIT_SIZE:  # fillPreBlank filler
            continue
        if next_phy_file_start is not None and off_py < next_phy_file_start:
            continue
        if not _matches(codes, tags_code):
            continue
        if off_py < min_phy or off_py + size_py > max_phy:
            if total == 0:
                res.status = GetMessageStatus.MESSAGE_WAS_REMOVING
            next_phy_file_start = cl.files.roll_next(off_py)
            continue
        bad: CorruptRecordError | None = None
        try:  # a batch record read, checked and split already: no read, no CRC
            hit = store.inner_batches.message(off_py, size_py, queue_id, qoff, topic)
        except CorruptRecordError as exc:
            hit, bad = None, exc
        if hit is None and bad is None:
            try:
                found = cl.read_message(off_py, size_py)
            except CorruptRecordError:
                if total == 0:
                    res.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = cl.files.roll_next(off_py)
                continue
            try:
                hit = unit_message(
                    check_body_crc(found), queue_id, qoff, topic, store.inner_batches
                )
            except CorruptRecordError as exc:
                bad = exc
        if bad is not None or hit is None:
            assert bad is not None
            store.note_damage(topic, queue_id, qoff, bad)
            if not res.messages:
                raise bad
            scanned -= 1  # the batch stops before it: the next call starts at it
            break
        rec = hit
        res.messages.append(rec)
        res.queue_offsets.append(qoff)
        total += size_py
        max_pulled_phy = off_py
        res.status = GetMessageStatus.FOUND
        next_phy_file_start = None
    res.buffer_total_size = total
    res.next_begin_offset = offset + scanned
    if res.messages:
        res.suggest_pulling_from_slave = max_phy - max_pulled_phy > memory
    return res
