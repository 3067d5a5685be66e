// rmqfs test oracle (our code): RocketMQ 5.3.3's side of Oracle.java (which says what the harness
// does and prints, the same lines as with 4.9.8): its DefaultMessageStore with its default
// file-based ConsumeQueue (no RocksDB, no timer store), and the units read through
// ConsumeQueueInterface.iterateFrom.
//
// 5.x's constructor takes a topic config table, as the broker hands it its TopicConfigManager's:
// one TopicConfig per topic directory under consumequeue/ (read/write queue numbers: its highest
// queue id + 1; perm RW; default attributes, so every queue is a plain file ConsumeQueue).
import java.io.File;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.queue.ReferredIterator;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class OracleRead5 extends Oracle {
    public static void main(String[] args) {
        Oracle.main(new OracleRead5(), "OracleRead5", args);
    }

    @Override
    DefaultMessageStore open(MessageStoreConfig cfg, BrokerStatsManager stats, File root) throws Exception {
        return new DefaultMessageStore(cfg, stats, null, new BrokerConfig(), topicTable(root));
    }

    /** One iterator covers the rest of one ConsumeQueue file, so a new one starts at each file. */
    @Override
    Map<Long, long[]> units(DefaultMessageStore store, String topic, int queueId, long min, long max) {
        ConsumeQueueInterface cq = queue(store, topic, queueId);
        Map<Long, long[]> units = new HashMap<>();
        long idx = min;
        while (idx < max) {
            ReferredIterator<CqUnit> it = cq.iterateFrom(idx);
            if (it == null) {
                throw new IllegalStateException("iterateFrom(" + idx + ") null for " + topic + "/" + queueId);
            }
            try {
                while (it.hasNext() && idx < max) {
                    CqUnit u = it.next();
                    if (u.getQueueOffset() != idx) {
                        throw new IllegalStateException("unit " + idx + " of " + topic + "/" + queueId
                            + " says queue offset " + u.getQueueOffset());
                    }
                    units.put(u.getPos(), new long[] {idx, u.getSize(), u.getTagsCode()});
                    idx++;
                }
            } finally {
                it.release();
            }
        }
        return units;
    }

    @Override
    long cqMaxPhysicOffset(DefaultMessageStore store, String topic, int queueId) {
        return queue(store, topic, queueId).getMaxPhysicOffset();
    }

    static ConsumeQueueInterface queue(DefaultMessageStore store, String topic, int queueId) {
        ConsumeQueueInterface cq = store.getConsumeQueue(topic, queueId);
        if (cq == null) {
            throw new IllegalStateException("no ConsumeQueue loaded for " + topic + "/" + queueId);
        }
        return cq;
    }

    /** One TopicConfig per topic directory under consumequeue/, as a broker's table would hold it. */
    static ConcurrentMap<String, TopicConfig> topicTable(File root) {
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        File cqRoot = new File(root, "consumequeue");
        for (String topic : sortedNames(cqRoot)) {
            int queues = 0;
            for (String qdir : sortedNames(new File(cqRoot, topic))) {
                queues = Math.max(queues, Integer.parseInt(qdir) + 1);
            }
            table.put(topic, new TopicConfig(topic, queues, queues, PermName.PERM_READ | PermName.PERM_WRITE));
        }
        return table;
    }
}
