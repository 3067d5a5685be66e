// rmqfs test oracle (our code): what both harnesses share, OracleRead.java (RocketMQ 4.9.8) and
// OracleRead5.java (5.3.3), compiled with each against its version's classes. It opens a store
// directory with RocketMQ's own DefaultMessageStore and prints, one JSON line each, every message it
// reads back, then a summary. Built and run by tests/rocketmq_oracle.py
// (`python3 tests/rocketmq_oracle.py [VERSION] run ARGS`).
//
//   java ... OracleRead|OracleRead5 [--start] [--body] STORE_ROOT COMMITLOG_FILE_SIZE CQ_FILE_SIZE
//        MAX_HASH_SLOT_NUM MAX_INDEX_NUM
//
// STORE_ROOT must be a COPY: load() runs RocketMQ's recovery (it may truncate files, and it maps the
// checkpoint read-write). Without --start the store is only load()ed, as a broker does before it
// starts, and the reads see the ConsumeQueue and index files as they are on disk; getMessage refuses
// to read while the store's `shutdown` flag is set, so that one private field is cleared by
// reflection. With --start, start() runs too (the broker's path: ReputMessageService dispatches any
// CommitLog tail the ConsumeQueues lack, the store takes its lock and the HA service listens on an
// ephemeral port), and shutdown() persists as a broker would.
//
// Per message: where getMessage found it (topic, queueId, queueOffset, commitLogOffset), its decoded
// fields (MessageDecoder.decode, body not decompressed), its ConsumeQueue unit (cqIndex, cqSize,
// tagsCode, as the version's harness reads it), whether lookMessageByOffset decodes to the same
// message (lookMatches), and whether queryMessage(topic, key, 64, 0, Long.MAX_VALUE) finds its
// commitLogOffset for its UNIQ_KEY (indexFoundUniq) and for every one of its KEYS (indexFoundKeys;
// null when it has none). Any exception: a message on stderr and exit status 1.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.CRC32;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.StoreCheckpoint;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public abstract class Oracle {
    /** A version's store: built from the config (the constructor differs by version). */
    abstract DefaultMessageStore open(MessageStoreConfig cfg, BrokerStatsManager stats, File root) throws Exception;

    /**
     * The units of queue offsets [min, max) of a ConsumeQueue as stored: commitLogOffset -> {queue offset,
     * size, tagsCode} (the ConsumeQueue API differs by version).
     */
    abstract Map<Long, long[]> units(DefaultMessageStore store, String topic, int queueId, long min, long max)
        throws Exception;

    /** The ConsumeQueue's maxPhysicOffset. */
    abstract long cqMaxPhysicOffset(DefaultMessageStore store, String topic, int queueId);

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String GROUP = "rmqfs-oracle";
    private static final int QUERY_MAX = 64;

    /** The harness's main: its exit status 0, 2 (usage) or 1 (any exception, on stderr). */
    static void main(Oracle oracle, String name, String[] args) {
        try {
            System.exit(oracle.run(name, args));
        } catch (Throwable t) {
            System.out.flush();
            System.err.println(name + " failed: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    int run(String name, String[] argv) throws Exception {
        List<String> args = new ArrayList<>(Arrays.asList(argv));
        boolean start = args.remove("--start");
        boolean withBody = args.remove("--body");
        if (args.size() != 5) {
            System.err.println("usage: " + name + " [--start] [--body] STORE_ROOT COMMITLOG_FILE_SIZE CQ_FILE_SIZE"
                + " MAX_HASH_SLOT_NUM MAX_INDEX_NUM");
            return 2;
        }
        File root = new File(args.get(0)).getAbsoluteFile();
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setStorePathRootDir(root.getPath());
        cfg.setStorePathCommitLog(new File(root, "commitlog").getPath());
        cfg.setMappedFileSizeCommitLog(Integer.parseInt(args.get(1)));
        cfg.setMappedFileSizeConsumeQueue(Integer.parseInt(args.get(2)));
        cfg.setMaxHashSlotNum(Integer.parseInt(args.get(3)));
        cfg.setMaxIndexNum(Integer.parseInt(args.get(4)));
        cfg.setHaListenPort(0);

        boolean abortBefore = new File(root, "abort").exists();
        BrokerStatsManager stats = new BrokerStatsManager("rmqfs-oracle", false);
        DefaultMessageStore store = open(cfg, stats, root);
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() returned false");
        }
        if (start) {
            store.start();
        } else {
            setShutdownFlag(store, false);
        }

        long messages = 0;
        List<Map<String, Object>> queues = new ArrayList<>();
        File cqRoot = new File(root, "consumequeue");
        for (String topic : sortedNames(cqRoot)) {
            for (String qdir : sortedNames(new File(cqRoot, topic))) {
                int queueId = Integer.parseInt(qdir);
                Map<String, Object> q = readQueue(store, topic, queueId, withBody);
                messages += (Long) q.get("messages");
                queues.add(q);
            }
        }

        Map<String, Object> sum = new LinkedHashMap<>();
        sum.put("kind", "summary");
        sum.put("mode", start ? "start" : "load");
        sum.put("abortFileBeforeLoad", abortBefore);
        sum.put("minPhyOffset", store.getMinPhyOffset());
        sum.put("maxPhyOffset", store.getMaxPhyOffset());
        long cqMaxPhysic = -1;
        for (Map<String, Object> q : queues) {
            cqMaxPhysic = Math.max(cqMaxPhysic, (Long) q.get("cqMaxPhysicOffset"));
        }
        sum.put("cqMaxPhysicOffset", cqMaxPhysic);
        sum.put("messages", messages);
        StoreCheckpoint cp = store.getStoreCheckpoint();
        Map<String, Object> cpm = new LinkedHashMap<>();
        cpm.put("physicMsgTimestamp", cp.getPhysicMsgTimestamp());
        cpm.put("logicsMsgTimestamp", cp.getLogicsMsgTimestamp());
        cpm.put("indexMsgTimestamp", cp.getIndexMsgTimestamp());
        sum.put("checkpoint", cpm);
        sum.put("queues", queues);
        System.out.println(JSON.writeValueAsString(sum));
        System.out.flush();

        if (!start) {
            // Never started: its services hold no sockets or flush threads, and shutdown() with the
            // flag cleared would stop services that never ran. Set it back, so that shutdown()
            // only releases the pool and the JVM's exit ends the allocator thread; nothing is written.
            setShutdownFlag(store, true);
        }
        store.shutdown();
        stats.shutdown();
        return 0;
    }

    Map<String, Object> readQueue(DefaultMessageStore store, String topic, int queueId, boolean withBody)
        throws Exception {
        long min = store.getMinOffsetInQueue(topic, queueId);
        long max = store.getMaxOffsetInQueue(topic, queueId);
        Map<Long, long[]> units = units(store, topic, queueId, min, max);

        long count = 0;
        long offset = min;
        List<String> statuses = new ArrayList<>();
        while (offset < max) {
            GetMessageResult res = store.getMessage(GROUP, topic, queueId, offset, 32, null);
            if (res == null) {
                throw new IllegalStateException("getMessage returned null for " + topic + "/" + queueId + "@" + offset);
            }
            try {
                if (res.getMessageBufferList().isEmpty()) {
                    statuses.add(offset + ":" + res.getStatus() + "->" + res.getNextBeginOffset());
                }
                for (ByteBuffer buf : res.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(buf.slice(), true, false, false);
                    if (m == null) {
                        throw new IllegalStateException("MessageDecoder.decode returned null in " + topic + "/" + queueId
                            + " near queue offset " + offset);
                    }
                    System.out.println(JSON.writeValueAsString(messageLine(store, m, units.get(m.getCommitLogOffset()), withBody)));
                    count++;
                }
            } finally {
                res.release();
            }
            if (res.getNextBeginOffset() <= offset) {
                statuses.add(offset + ":" + res.getStatus() + " stuck");
                break;
            }
            offset = res.getNextBeginOffset();
        }

        Map<String, Object> q = new LinkedHashMap<>();
        q.put("topic", topic);
        q.put("queueId", queueId);
        q.put("minOffset", min);
        q.put("maxOffset", max);
        q.put("cqMaxPhysicOffset", cqMaxPhysicOffset(store, topic, queueId));
        q.put("cqUnits", (long) units.size());
        q.put("messages", count);
        q.put("emptyReads", statuses);  // getMessage calls that returned no message: "offset:STATUS->next"
        return q;
    }

    static Map<String, Object> messageLine(DefaultMessageStore store, MessageExt m, long[] unit, boolean withBody) {
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
        CRC32 crc = new CRC32();
        crc.update(body);
        String uniq = MessageClientIDSetter.getUniqID(m);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "message");
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("size", m.getStoreSize());
        o.put("bodyLen", body.length);
        o.put("bodyCrc32", crc.getValue());
        if (withBody) {
            o.put("body", Base64.getEncoder().encodeToString(body));
        }
        o.put("bodyCRC", m.getBodyCRC());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("uniqKey", uniq);
        o.put("properties", m.getProperties() == null ? null : new TreeMap<>(m.getProperties()));
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("msgId", m.getMsgId());
        o.put("flag", m.getFlag());
        o.put("sysFlag", m.getSysFlag());
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        o.put("bornHost", host(m.getBornHost()));
        o.put("storeHost", host(m.getStoreHost()));
        o.put("cqIndex", unit == null ? null : unit[0]);
        o.put("cqSize", unit == null ? null : unit[1]);
        o.put("tagsCode", unit == null ? null : unit[2]);

        MessageExt looked = store.lookMessageByOffset(m.getCommitLogOffset());
        o.put("lookMatches", looked != null && same(m, looked));

        o.put("indexFoundUniq", uniq == null ? null : indexFinds(store, m.getTopic(), uniq, m.getCommitLogOffset()));
        Boolean keysFound = null;
        List<String> missing = new ArrayList<>();
        if (m.getKeys() != null) {
            for (String k : m.getKeys().split(MessageConst.KEY_SEPARATOR)) {
                if (k.isEmpty()) {
                    continue;
                }
                boolean f = indexFinds(store, m.getTopic(), k, m.getCommitLogOffset());
                keysFound = (keysFound == null || keysFound) && f;
                if (!f) {
                    missing.add(k);
                }
            }
        }
        o.put("indexFoundKeys", keysFound);
        if (!missing.isEmpty()) {
            o.put("indexMissingKeys", missing);
        }
        return o;
    }

    static boolean indexFinds(DefaultMessageStore store, String topic, String key, long commitLogOffset) {
        QueryMessageResult r = store.queryMessage(topic, key, QUERY_MAX, 0, Long.MAX_VALUE);
        try {
            for (ByteBuffer b : r.getMessageBufferList()) {
                MessageExt hit = MessageDecoder.decode(b.slice(), false, false, false);
                if (hit != null && hit.getCommitLogOffset() == commitLogOffset) {
                    return true;
                }
            }
            return false;
        } finally {
            r.release();
        }
    }

    static boolean same(MessageExt a, MessageExt b) {
        return a.getTopic().equals(b.getTopic()) && a.getQueueId() == b.getQueueId()
            && a.getQueueOffset() == b.getQueueOffset() && a.getCommitLogOffset() == b.getCommitLogOffset()
            && a.getStoreSize() == b.getStoreSize() && a.getStoreTimestamp() == b.getStoreTimestamp()
            && a.getBornTimestamp() == b.getBornTimestamp() && a.getSysFlag() == b.getSysFlag()
            && a.getBodyCRC() == b.getBodyCRC() && String.valueOf(a.getProperties()).equals(String.valueOf(b.getProperties()));
    }

    static String host(SocketAddress a) {
        if (a instanceof InetSocketAddress) {
            InetSocketAddress s = (InetSocketAddress) a;
            String h = s.getAddress().getHostAddress();
            return (h.contains(":") ? "[" + h + "]" : h) + ":" + s.getPort();
        }
        return String.valueOf(a);
    }

    static List<String> sortedNames(File dir) {
        String[] names = dir.list();
        List<String> out = new ArrayList<>(names == null ? new ArrayList<>() : Arrays.asList(names));
        out.sort(null);
        return out;
    }

    static void setShutdownFlag(DefaultMessageStore store, boolean value) throws Exception {
        Field f = DefaultMessageStore.class.getDeclaredField("shutdown");
        f.setAccessible(true);
        f.setBoolean(store, value);
    }
}
