"""RocketMQ's ``mqadmin`` names and option letters over the offline commands: one table.

An operator who knows mqadmin types mqadmin: ``rmqfs queryMsgByOffset STORE -t T -b broker-a
-i 0 -o 7`` is ``rmqfs query-msg STORE -t T -q 0 -o 7``. Each entry of :data:`COMMANDS` names an
mqadmin subcommand, the rmqfs command it runs, and every option letter that subcommand defines
(``tools/src/main/java/org/apache/rocketmq/tools/command/**/*SubCommand.java``,
``buildCommandlineOptions``), each with what it becomes here:

* an rmqfs option (the value is passed on: ``-i`` of queryMsgByOffset becomes ``--queue-id``);
* a check against the store for the options that route on a cluster (one store is one
  broker): ``-b brokerName``, ``-b brokerAddr``, ``-c clusterName`` and mqadmin's global ``-n
  namesrvAddr`` are compared with the store's broker.conf (``--config``: brokerName,
  brokerIP1:listenPort, brokerClusterName, namesrvAddr; without it RocketMQ's defaults: the
  host name, 127.0.0.1:10911, DefaultCluster). A mismatch is an error naming the store's
  value; ``-n`` without a namesrvAddr to compare with is accepted with a note on stderr;
* accepted without effect, with the reason (``resetOffsetByTime -f``: deprecated);
* refused with the reason when given (``queryMsgById -d clientId`` pushes the message to a
  live consumer).

Options a routing command requires on a cluster (``deleteTopic -c``, ``queryMsgByOffset -b``,
``printMsgByQueue -a``) are optional here: the STORE argument is the broker. mqadmin's other
required options stay required. The parsed options become an rmqfs command line that the rmqfs
parser reads (its checks and defaults are the command's own).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import admin
from .admin import AdminError, Command, ParserT, Subparsers, broker_config

if TYPE_CHECKING:
    from rmqfs.engine.store import StoreConfig

# what an option becomes (Opt.kind)
VALUE = "value"  # the rmqfs option Opt.to, with the value
FLAG = "flag"  # an mqadmin flag (no value): the rmqfs flag Opt.to
FLAG_OFF = "flag-off"  # an mqadmin flag whose absence is the rmqfs flag Opt.to
IF_TRUE = "if-true"  # an mqadmin true|false option: true is the rmqfs flag Opt.to
IF_FALSE = "if-false"  # an mqadmin true|false option: false is the rmqfs flag Opt.to
BROKER_NAME = "brokerName"  # checked against the store's broker name
BROKER_ADDR = "brokerAddr"  # checked against brokerIP1:listenPort
CLUSTER = "clusterName"  # checked against brokerClusterName
NAMESRV = "namesrvAddr"  # checked against namesrvAddr when broker.conf has one
ACCEPT = "accept"  # accepted, no effect here (Opt.why says why)
LIVE = "live"  # refused when given: needs a live cluster (Opt.why)
LIVE_TRUE = "live-if-true"  # a boolean: false accepted, true refused (Opt.why)


@dataclass(frozen=True)
class Opt:
    """One mqadmin option letter of a subcommand and what it becomes in rmqfs."""

    letter: str  # mqadmin's short option, without the dash
    long: str  # mqadmin's long name
    kind: str = VALUE
    to: str = ""  # the rmqfs option (VALUE, FLAG, FLAG_OFF)
    required: bool = False
    default: str | None = None  # VALUE: what mqadmin assumes when the option is absent
    why: str = ""  # ACCEPT, LIVE, LIVE_TRUE: the reason, for --help and the error


@dataclass(frozen=True)
class MqCommand:
    """An mqadmin subcommand that rmqfs runs as ``rmqfs <rmqfs>`` with translated options."""

    name: str  # mqadmin's commandName()
    rmqfs: str  # the rmqfs command
    java: str  # the SubCommand class (tools/.../command/<java>)
    opts: tuple[Opt, ...]
    fixed: tuple[str, ...] = ()  # rmqfs arguments always added
    replaces: tuple[tuple[str, str], ...] = ()  # (a, b): given letter a drops letter b


def _v(letter: str, long: str, to: str, required: bool = False, default: str | None = None) -> Opt:
    return Opt(letter, long, VALUE, to, required, default)


def _broker(letter: str = "b", long: str = "brokerName") -> Opt:
    return Opt(letter, long, BROKER_NAME)


def _addr(letter: str = "b", long: str = "brokerAddr") -> Opt:
    return Opt(letter, long, BROKER_ADDR)


def _cluster(letter: str = "c", long: str = "clusterName") -> Opt:
    return Opt(letter, long, CLUSTER)


def _live(letter: str, long: str, why: str) -> Opt:
    return Opt(letter, long, LIVE, why=why)


_PUSH = "pushes the message to a live consumer client"
_GROUP_LIVE = "a consumer group's clients register with a live broker"

#: Every mqadmin subcommand rmqfs answers to, with all of its option letters (mqadmin's global
#: ``-n namesrvAddr`` is added to each). docs/offline-commands.md lists them with the rest.
COMMANDS: tuple[MqCommand, ...] = (
    MqCommand(
        "sendMessage",
        "produce",
        "message/SendMessageCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _v("p", "body", "--body", required=True),
            _v("k", "key", "--keys"),
            _v("c", "tags", "--tags"),
            _broker("b", "broker"),
            _v("i", "qid", "--queue-id"),
            Opt("m", "msgTraceEnable", LIVE_TRUE, why="traces are sent by a client to a cluster"),
        ),
    ),
    MqCommand(
        "printMsg",
        "print-msg",
        "message/PrintMessageSubCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _v("c", "charsetName", "--charset"),
            _v("s", "subExpression", "--sub-expression"),
            _v("b", "beginTimestamp", "--begin"),
            _v("e", "endTimestamp", "--end"),
            _v("d", "printBody", "--print-body"),
            Opt("l", "lmqParentTopic", ACCEPT, why="it finds an LMQ's route; the store is it"),
        ),
    ),
    MqCommand(
        "printMsgByQueue",
        "print-msg",
        "message/PrintMessageByQueueCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _broker("a", "brokerName"),
            _v("i", "queueId", "--queue-id", required=True),
            _v("c", "charsetName", "--charset"),
            _v("s", "subExpression", "--sub-expression"),
            _v("b", "beginTimestamp", "--begin"),
            _v("e", "endTimestamp", "--end"),
            _v("p", "print msg", "--print-msg", default="false"),
            _v("d", "printBody", "--print-body", default="false"),
            Opt("f", "calculate", IF_TRUE, "--tag-counts"),
        ),
    ),
    MqCommand(
        "consumeMessage",
        "print-msg",
        "message/ConsumeMessageCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _broker("b", "brokerName"),
            _v("i", "queueId", "--queue-id"),
            _v("o", "offset", "--from-offset"),
            Opt("g", "consumerGroup", ACCEPT, why="reading a store pulls for no group"),
            _v("s", "beginTimestamp", "--begin"),
            _v("e", "endTimestamp", "--end"),
            _v("c", "MessageNumber", "--max", default="128"),
        ),
    ),
    MqCommand(
        "queryMsgByKey",
        "query-msg",
        "message/QueryMsgByKeySubCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _v("k", "msgKey", "--key", required=True),
            _v("b", "beginTimestamp", "--begin"),
            _v("e", "endTimestamp", "--end"),
            _v("m", "maxNum", "--max-num"),
            _cluster("c", "cluster"),
        ),
    ),
    MqCommand(
        "queryMsgById",
        "query-msg",
        "message/QueryMsgByIdSubCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _v("i", "msgId", "--msg-id", required=True),
            _live("g", "consumerGroup", _PUSH),
            _live("d", "clientId", _PUSH),
            _live("s", "sendMessage", "sends the message again through a live broker"),
            _live("u", "unitName", "a unit is a route of a live cluster"),
            _v("f", "bodyFormat", "--charset"),
            _cluster("c", "cluster"),
        ),
    ),
    MqCommand(
        "queryMsgByOffset",
        "query-msg",
        "message/QueryMsgByOffsetSubCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _broker("b", "brokerName"),
            _v("i", "queueId", "--queue-id", required=True),
            _v("o", "offset", "--offset", required=True),
            _v("f", "bodyFormat", "--charset"),
        ),
    ),
    MqCommand(
        "queryMsgByUniqueKey",
        "query-msg",
        "message/QueryMsgByUniqueKeySubCommand",
        (
            _v("i", "msgId", "--msg-id", required=True),
            _live("g", "consumerGroup", _PUSH),
            _live("d", "clientId", _PUSH),
            _v("t", "topic", "--topic", required=True),
            Opt("a", "showAll", FLAG_OFF, "--first"),
            _cluster("c", "cluster"),
        ),
        fixed=("--uniq-key",),
    ),
    MqCommand(
        "queryMsgTraceById",
        "query-trace",
        "message/QueryMsgTraceByIdSubCommand",
        (
            _v("i", "msgId", "--msg-id", required=True),
            _v("t", "traceTopic", "--trace-topic"),
            _v("b", "beginTimestamp", "--begin"),
            _v("e", "endTimestamp", "--end"),
            _v("c", "maxNum", "--max-num"),
        ),
    ),
    MqCommand(
        "topicList",
        "topic-list",
        "topic/TopicListSubCommand",
        (Opt("c", "clusterModel", FLAG, "--clusters"),),
    ),
    MqCommand(
        "topicStatus",
        "topic-status",
        "topic/TopicStatusSubCommand",
        (_v("t", "topic", "--topic", required=True), _cluster("c", "cluster")),
    ),
    MqCommand(
        "consumerProgress",
        "consumer-progress",
        "consumer/ConsumerProgressSubCommand",
        (
            _v("g", "groupName", "--group"),
            _v("t", "topicName", "--topic"),
            Opt("s", "showClientIP", LIVE_TRUE, why=_GROUP_LIVE),
            _cluster("c", "cluster"),
        ),
    ),
    MqCommand(
        "getConsumerStatus",
        "consumer-progress",
        "offset/GetConsumerStatusCommand",
        (
            _v("g", "group", "--group", required=True),
            _v("t", "topic", "--topic", required=True),
            _live("i", "originClientId", _GROUP_LIVE),
        ),
    ),
    MqCommand(
        "resetOffsetByTime",
        "reset-offset",
        "offset/ResetOffsetByTimeCommand",
        (
            _v("g", "group", "--group", required=True),
            _v("t", "topic", "--topic", required=True),
            _v("s", "timestamp", "--timestamp", required=True),
            Opt("f", "force", IF_FALSE, "--rollback-only"),
            _addr("b", "broker"),
            _v("q", "queue", "--queue-id"),
            _v("o", "offset", "--offset"),
            # -c is defined twice there (cplus, then cluster): the second, with a value, wins
            _cluster("c", "cluster"),
        ),
        replaces=(("o", "s"),),
    ),
    MqCommand(
        "skipAccumulatedMessage",
        "reset-offset",
        "offset/SkipAccumulationSubCommand",
        (
            _v("g", "group", "--group", required=True),
            _v("t", "topic", "--topic", required=True),
            Opt("f", "force", IF_FALSE, "--rollback-only"),
            _cluster("c", "cluster"),
        ),
        fixed=("--timestamp=-1",),  # the max offset (SkipAccumulationSubCommand's timestamp -1)
    ),
    MqCommand(
        "deleteTopic",
        "delete-topic",
        "topic/DeleteTopicSubCommand",
        (_v("t", "topic", "--topic", required=True), _cluster()),
    ),
    MqCommand(
        "updateTopic",
        "update-topic",
        "topic/UpdateTopicSubCommand",
        (
            _addr(),
            _cluster(),
            _live("a", "attributes", "rmqfs keeps a topic's attributes as they are"),
            _v("t", "topic", "--topic", required=True),
            _v("r", "readQueueNums", "--read-queue-nums"),
            _v("w", "writeQueueNums", "--write-queue-nums"),
            _v("p", "perm", "--perm"),
            _v("o", "order", "--order"),
            _live("u", "unit", "unit topics are routes of a live cluster"),
            _live("s", "hasUnitSub", "unit topics are routes of a live cluster"),
        ),
        fixed=("--mqadmin-defaults",),  # mqadmin sends a whole config
    ),
    MqCommand(
        "deleteSubGroup",
        "delete-sub-group",
        "consumer/DeleteSubscriptionGroupCommand",
        (
            _addr(),
            _cluster(),
            _v("g", "groupName", "--group-name", required=True),
            _v("r", "removeOffset", "--remove-offset"),
        ),
    ),
    MqCommand(
        "updateSubGroup",
        "update-sub-group",
        "consumer/UpdateSubGroupSubCommand",
        (
            _addr(),
            _cluster(),
            _v("g", "groupName", "--group-name", required=True),
            _v("s", "consumeEnable", "--consumeEnable"),
            _v("m", "consumeFromMinEnable", "--consumeFromMinEnable"),
            _v("d", "consumeBroadcastEnable", "--consumeBroadcastEnable"),
            _v("o", "consumeMessageOrderly", "--consumeMessageOrderly"),
            _v("q", "retryQueueNums", "--retryQueueNums"),
            _v("r", "retryMaxTimes", "--retryMaxTimes"),
            _live("p", "groupRetryPolicy", "rmqfs keeps a group's retry policy as it is"),
            _v("i", "brokerId", "--brokerId"),
            _v("w", "whichBrokerWhenConsumeSlowly", "--whichBrokerWhenConsumeSlowly"),
            _v("a", "notifyConsumerIdsChanged", "--notifyConsumerIdsChangedEnable"),
        ),
        fixed=("--mqadmin-defaults",),  # mqadmin sends a whole config
    ),
    MqCommand(
        "cloneGroupOffset",
        "clone-group-offset",
        "offset/CloneGroupOffsetCommand",
        (
            _v("s", "srcGroup", "--src-group", required=True),
            _v("d", "destGroup", "--dest-group", required=True),
            _v("t", "topic", "--topic", required=True),
            _v("o", "offline", "--offline"),
        ),
    ),
    MqCommand(
        "queryCq",
        "query-cq",
        "queue/QueryConsumeQueueCommand",
        (
            _v("t", "topic", "--topic", required=True),
            _v("q", "queue", "--queue", required=True),
            _v("i", "index", "--index", required=True),
            _v("c", "count", "--count"),
            _addr("b", "broker"),
            _live("g", "consumer", "it filters by a subscription a live consumer registers"),
        ),
    ),
    MqCommand(
        "statsAll",
        "stats-all",
        "stats/StatsAllSubCommand",
        (Opt("a", "activeTopic", FLAG, "--active-topic"), _v("t", "topic", "--topic")),
    ),
    MqCommand(
        "getBrokerConfig",
        "get-broker-config",
        "broker/GetBrokerConfigCommand",
        (
            _addr(),
            _cluster(),
        ),
    ),
    MqCommand(
        "brokerStatus",
        "broker-status",
        "broker/BrokerStatusSubCommand",
        (
            _addr(),
            _cluster(),
        ),
    ),
    MqCommand(
        "deleteExpiredCommitLog",
        "clean",
        "broker/DeleteExpiredCommitLogSubCommand",
        (_addr(), _cluster("c", "cluster")),
    ),
)

#: mqadmin's global option, added to every subcommand (MQAdminStartup: ``-n``).
NAMESRV_OPT = Opt("n", "namesrvAddr", NAMESRV)

BY_NAME = {c.name: c for c in COMMANDS}


@dataclass(frozen=True)
class NotOffered:
    """An mqadmin subcommand rmqfs does not run on a store directory: what to use instead
    (an rmqfs command line, in the manual's markdown; empty when nothing offline comes close)
    and why. ``live``: it needs a running broker, name server or client; else rmqfs does not
    offer it for the reason given."""

    name: str  # mqadmin's commandName()
    instead: str
    why: str
    live: bool = True

    def manual_cells(self) -> tuple[str, str]:
        """The two cells of its row in docs/offline-commands.md (``rmqfs`` and ``where``)."""
        return (
            self.instead or "-",
            ("needs a live cluster: " if self.live else "not offered: ") + self.why,
        )

    def message(self) -> str:
        """What ``rmqfs NAME`` says (one line, exit status 2)."""
        head = (
            f"mqadmin {self.name} needs a live cluster: {self.why}"
            if self.live
            else f"mqadmin {self.name} is not offered: {self.why}"
        )
        if not self.instead:
            return head + "; rmqfs has no offline equivalent"
        m = re.match(r"`([a-z][a-z-]*)( [^`]*)?`(.*)", self.instead)
        if m:  # "`topic-status -t T` (this broker's queues)": the command, STORE in place
            line = f"rmqfs {m[1]} STORE{m[2] or ''}{m[3]}"
        else:
            line = self.instead
        return head + "; instead: " + line.replace("`", "")


# Reasons shared by several commands.
_ACL = (
    "ACL 2.0 users and rules are served by a running broker's auth metadata "
    "(RocksDB/JSON under config/ that rmqfs does not read)"
)
_QUORUM = 'a DLedger/controller quorum: live election state'
_CLIENTS = 'asks live client connections'
_COLD = "a running broker's cold-read flow control"
_RT = 'measures send round trips to a live broker'
_ROUTES = 'cluster membership and routes: a running name server'
_KV = 'name server KV config'
_ROCKSDB_CONFIG = 'a RocksDB config store; rmqfs keeps JSON'
_NAMESRV = "a running name server's settings"
_STATIC = 'static topics map logical queues across live brokers'

NOT_OFFERED: tuple[NotOffered, ...] = (
    NotOffered('addBroker', '', 'adds a broker to a running BrokerContainer'),
    NotOffered(
        'addWritePerm',
        '`update-topic -p 6` per topic',
        "restores a broker's write permission in the name server's routes",
    ),
    NotOffered('allocateMQ', '', 'the client-side queue allocation over a live route'),
    NotOffered(
        'brokerConsumeStats',
        "`consumer-progress` (every group's diff)",
        "asks a running broker for every group's consume stats",
    ),
    NotOffered('checkMsgSendRT', '', _RT),
    NotOffered(
        'checkRocksdbCqWriteProgress',
        '`verify` (ConsumeQueues against the CommitLog)',
        "compares a live broker's RocksDB ConsumeQueue; rmqfs stores file ConsumeQueues",
    ),
    NotOffered('cleanBrokerMetadata', '', _QUORUM),
    NotOffered(
        'cleanExpiredCQ',
        "`clean` (ConsumeQueue files below the CommitLog's min offset go with expiry)",
        'a command to a running broker',
    ),
    NotOffered(
        'cleanUnusedTopic',
        '`delete-topic -t T`',
        'a running broker drops in-memory topics without queues',
    ),
    NotOffered('clusterList', '`broker-status`', _ROUTES),
    NotOffered('clusterRT', '', 'measures send round trips across a live cluster'),
    NotOffered('consumer', '`consumer-progress -g G`', _CLIENTS),
    NotOffered('consumerConnection', '', _CLIENTS),
    NotOffered(
        'consumerStatus',
        '`consumer-progress -g G` (offsets; no client state)',
        "a live consumer's running info (jstack, process queues)",
    ),
    NotOffered('copyAcl', '', _ACL),
    NotOffered('copyUser', '', _ACL),
    NotOffered('createAcl', '', _ACL),
    NotOffered('createUser', '', _ACL),
    NotOffered(
        'DecodeMessageId',
        '`query-msg -i MSGID` (prints the store host and CommitLog offset of the message)',
        'pure decoding; rmqfs decodes while looking the message up',
        live=False,
    ),
    NotOffered('deleteAcl', '', _ACL),
    NotOffered('deleteKvConfig', '', _KV),
    NotOffered('deleteUser', '', _ACL),
    NotOffered(
        'dumpCompactionLog',
        '',
        "compaction topics' compactionLog files, which rmqfs does not write",
        live=False,
    ),
    NotOffered('electMaster', '', _QUORUM),
    NotOffered('exportConfigs', '`get-broker-config`', "collects every live broker's settings"),
    NotOffered(
        'exportMetadata',
        'the files themselves: `STORE/config/topics.json`, `subscriptionGroup.json`',
        'collects metadata from live brokers',
    ),
    NotOffered('exportMetadataInRocksDB', '', _ROCKSDB_CONFIG, live=False),
    NotOffered(
        'exportMetrics', '`stats-all`, `broker-status`', "collects live brokers' runtime metrics"
    ),
    NotOffered('exportPopRecord', '', 'pop consumption records of a running broker'),
    NotOffered('getAcl', '', _ACL),
    NotOffered('getBrokerEpoch', '', 'controller-mode HA epochs of a live broker'),
    NotOffered('getColdDataFlowCtrInfo', '', _COLD),
    NotOffered(
        'getConsumerConfig',
        "`update-sub-group` prints a group's subscriptionGroup.json entry",
        'asks every broker of a live cluster',
    ),
    NotOffered('getControllerConfig', '', _QUORUM),
    NotOffered('getControllerMetaData', '', _QUORUM),
    NotOffered('getNamesrvConfig', '', _NAMESRV),
    NotOffered('getSyncStateSet', '', _QUORUM),
    NotOffered('getUser', '', _ACL),
    NotOffered('haStatus', '', 'replication state between live master and slaves'),
    NotOffered('listAcl', '', _ACL),
    NotOffered('listUser', '', _ACL),
    NotOffered('producer', '', _CLIENTS),
    NotOffered('producerConnection', '', _CLIENTS),
    NotOffered('remappingStaticTopic', '', _STATIC),
    NotOffered('removeBroker', '', 'removes a broker from a running BrokerContainer'),
    NotOffered('removeColdDataFlowCtrGroupConfig', '', _COLD),
    NotOffered('resetMasterFlushOffset', '', "a live slave's replication offset"),
    NotOffered(
        'resetOffsetByTimeOld',
        '`reset-offset -s TIME` (resetOffsetByTime)',
        'the old form of resetOffsetByTime',
        live=False,
    ),
    NotOffered('rocksDBConfigToJson', '', _ROCKSDB_CONFIG, live=False),
    NotOffered('sendMsgStatus', '', _RT),
    NotOffered(
        'setCommitLogReadAheadMode', '', "madvise mode of a running broker's mapped CommitLog"
    ),
    NotOffered('setConsumeMode', '', "pop/pull mode kept in a live broker's memory"),
    NotOffered('startMonitoring', '', 'monitors live consumers'),
    NotOffered('topicClusterList', '`get-broker-config` (brokerClusterName)', _ROUTES),
    NotOffered(
        'topicRoute',
        "`topic-status -t T` (this broker's queues)",
        'routes across brokers: a running name server',
    ),
    NotOffered('updateAcl', '', _ACL),
    NotOffered(
        'updateBrokerConfig',
        'edit broker.conf and pass `--config` (`get-broker-config` shows the effect)',
        "changes a running broker's settings in memory",
    ),
    NotOffered('updateColdDataFlowCtrGroupConfig', '', _COLD),
    NotOffered('updateControllerConfig', '', _QUORUM),
    NotOffered('updateKvConfig', '', _KV),
    NotOffered('updateNamesrvConfig', '', _NAMESRV),
    NotOffered('updateOrderConf', '', 'order configuration is name server KV config'),
    NotOffered('updateStaticTopic', '', _STATIC),
    NotOffered(
        'updateSubGroupList',
        '`update-sub-group` per group',
        'a file of groups sent to a live broker',
    ),
    NotOffered(
        'updateTopicList', '`update-topic` per topic', 'a file of topics sent to a live broker'
    ),
    NotOffered(
        'updateTopicPerm',
        '`update-topic -t T -p N` (updateTopic -p)',
        "goes through the name server's routes",
    ),
    NotOffered('updateUser', '', _ACL),
    NotOffered(
        'wipeWritePerm',
        '`update-topic -p 4` per topic; or mount with `-o ro`',
        "removes a broker's write permission in the name server's routes",
    ),
)

NOT_OFFERED_BY_NAME = {c.name: c for c in NOT_OFFERED}


def not_offered(name: str) -> str | None:
    """The one-line answer to ``rmqfs NAME`` for an mqadmin command rmqfs does not run (why,
    and what to use instead), or None for any other name. mqadmin's command names are
    case-sensitive (``MQAdminStartup`` looks them up as typed), and so is this."""
    entry = NOT_OFFERED_BY_NAME.get(name)
    return None if entry is None else entry.message()


def aliases_of(rmqfs: str) -> list[str]:
    """The mqadmin names that run the rmqfs command ``rmqfs``."""
    return [c.name for c in COMMANDS if c.rmqfs == rmqfs]


def _store_value(kind: str, config: StoreConfig | None) -> tuple[str | None, str]:
    """(the store's value for a routing option, where it comes from)."""
    from rmqfs.engine.store import StoreConfig

    cfg = config or StoreConfig()
    key, value = {
        BROKER_NAME: ("brokerName", cfg.broker_name),
        BROKER_ADDR: ("brokerIP1:listenPort", f"{cfg.broker_ip1}:{cfg.listen_port}"),
        CLUSTER: ("brokerClusterName", cfg.broker_cluster_name),
        NAMESRV: ("namesrvAddr", cfg.namesrv_addr),
    }[kind]
    if config is not None:
        return value, f"{key} of --config"
    return value, f"RocketMQ's default {key}: no --config broker.conf names it"


_IS = {
    BROKER_NAME: "this store is broker",
    BROKER_ADDR: "this store's broker address is",
    CLUSTER: "this store's broker is in cluster",
    NAMESRV: "this store's broker registers with",
}


def check_routing(opt: Opt, value: str, config: StoreConfig | None) -> str | None:
    """Check a routing option (``-b``, ``-c``, ``-n``) against the store: raises AdminError
    when it names another broker, cluster or name server; returns a note for stderr when there
    is nothing to compare with (``-n`` without namesrvAddr in --config), else None."""
    mine, where = _store_value(opt.kind, config)
    given = value.strip()
    if opt.kind == NAMESRV:
        if mine is None:
            return (
                f"-{opt.letter} {given}: not checked: a store directory has no name server "
                "(a --config with namesrvAddr= checks it)"
            )
        if set(filter(None, given.split(";"))) <= set(filter(None, mine.split(";"))):
            return None
    elif given == mine:
        return None
    raise AdminError(f"-{opt.letter} {given}: {_IS[opt.kind]} {mine}, not {given} ({where})")


def _truth(value: str, letter: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise AdminError(f"-{letter} takes true or false, not {value!r}")
    return v == "true"


def translate(cmd: MqCommand, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(the rmqfs command line of parsed mqadmin ``args``, notes for stderr). Checks the
    routing options against the store (:func:`check_routing`) and refuses live-only options.
    Raises AdminError."""
    config = broker_config(args)
    argv = [cmd.rmqfs, args.store] + (["--config", args.config] if args.config else [])
    argv += list(cmd.fixed)
    notes = []
    given = {o.letter for o in cmd.opts if getattr(args, "o_" + o.letter) is not None}
    dropped = {b for a, b in cmd.replaces if a in given}
    for o in (*cmd.opts, NAMESRV_OPT):
        value = getattr(args, "o_" + o.letter)
        if o.letter in dropped:
            continue
        if o.kind == VALUE:
            value = value if value is not None else o.default
            if value is not None:
                argv.append(f"{o.to}={value}")
        elif o.kind == FLAG:
            if value:
                argv.append(o.to)
        elif o.kind == FLAG_OFF:
            if not value:
                argv.append(o.to)
        elif o.kind == IF_TRUE:
            if value is not None and _truth(value, o.letter):
                argv.append(o.to)
        elif o.kind == IF_FALSE:
            if value is not None and not _truth(value, o.letter):
                argv.append(o.to)
        elif value is None:
            continue
        elif o.kind in (BROKER_NAME, BROKER_ADDR, CLUSTER, NAMESRV):
            note = check_routing(o, value, config)
            if note:
                notes.append(note)
        elif o.kind == LIVE or (o.kind == LIVE_TRUE and _truth(value, o.letter)):
            raise AdminError(
                f"{cmd.name} -{o.letter} ({o.long}) needs a live cluster: {o.why}; "
                f"this reads the store directory {args.store}"
            )
    return argv, notes


def _help(o: Opt) -> str:
    if o.kind == VALUE:
        extra = f" (default {o.default})" if o.default is not None else ""
        return f"{o.long}: rmqfs {o.to}{extra}"
    if o.kind in (FLAG, FLAG_OFF, IF_TRUE, IF_FALSE):
        when = {FLAG: "", FLAG_OFF: " when absent", IF_TRUE: " when true", IF_FALSE: " when false"}[
            o.kind
        ]
        return f"{o.long}: rmqfs {o.to}{when}"
    if o.kind in (BROKER_NAME, BROKER_ADDR, CLUSTER, NAMESRV):
        return f"{o.long}: checked against the store's {o.kind} (broker.conf)"
    if o.kind == ACCEPT:
        return f"{o.long}: accepted, no effect: {o.why}"
    return f"{o.long}: needs a live cluster ({o.why})"


def add_subcommands(sub: Subparsers[ParserT]) -> None:
    """Register every mqadmin name of :data:`COMMANDS` on the ``rmqfs`` subparsers, hidden
    from the command list (``rmqfs --help`` groups them under their rmqfs command). Each parses
    mqadmin's letters, checks the routing options (:func:`translate`) and runs the rmqfs
    command line through the offline commands' parser (``admin.build_parser``)."""
    for cmd in COMMANDS:
        p = sub.add_parser(
            cmd.name,
            allow_abbrev=False,
            description=f"mqadmin {cmd.name} ({cmd.java}) on a store directory: runs "
            f"rmqfs {cmd.rmqfs} (rmqfs {cmd.rmqfs} --help). Routing options are checked "
            "against the store's broker.conf (--config).",
        )
        admin.add_store_args(p)
        for o in (*cmd.opts, NAMESRV_OPT):
            kw: dict[str, Any] = {"dest": "o_" + o.letter, "help": _help(o)}
            if o.kind in (FLAG, FLAG_OFF):
                kw["action"] = "store_true"
                kw["default"] = None
            else:
                kw["metavar"] = o.long.replace(" ", "").upper()
                kw["required"] = o.required
            p.add_argument(f"-{o.letter}", f"--{o.long.replace(' ', '')}", **kw)
        p.set_defaults(func=admin.wrap_command(_runner(cmd)))


def _runner(cmd: MqCommand) -> Command:
    def run(args: argparse.Namespace) -> int:
        argv, notes = translate(cmd, args)
        for note in notes:
            print(f"rmqfs: note: {note}", file=sys.stderr)
        inner = admin.build_parser().parse_args(argv)
        inner.mqadmin = cmd.name  # hints name the options of the name the user typed
        return inner.func(inner)

    run.__doc__ = f"mqadmin {cmd.name}: rmqfs {cmd.rmqfs}"
    return run
