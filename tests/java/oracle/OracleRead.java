// rmqfs test oracle (our code): RocketMQ 4.9.8's side of Oracle.java (which says what the harness
// does and prints): its DefaultMessageStore constructor, and its ConsumeQueue units read with
// ConsumeQueue.getIndexBuffer.
import java.io.File;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class OracleRead extends Oracle {
    public static void main(String[] args) {
        Oracle.main(new OracleRead(), "OracleRead", args);
    }

    @Override
    DefaultMessageStore open(MessageStoreConfig cfg, BrokerStatsManager stats, File root) throws Exception {
        return new DefaultMessageStore(cfg, stats, null, new BrokerConfig());
    }

    @Override
    Map<Long, long[]> units(DefaultMessageStore store, String topic, int queueId, long min, long max) {
        ConsumeQueue cq = queue(store, topic, queueId);
        Map<Long, long[]> units = new HashMap<>();
        long idx = min;
        while (idx < max) {
            SelectMappedBufferResult r = cq.getIndexBuffer(idx);
            if (r == null) {
                throw new IllegalStateException("getIndexBuffer(" + idx + ") null for " + topic + "/" + queueId);
            }
            try {
                ByteBuffer b = r.getByteBuffer();
                for (int i = 0; i + ConsumeQueue.CQ_STORE_UNIT_SIZE <= r.getSize() && idx < max; i += ConsumeQueue.CQ_STORE_UNIT_SIZE) {
                    units.put(b.getLong(i), new long[] {idx, b.getInt(i + 8), b.getLong(i + 12)});
                    idx++;
                }
            } finally {
                r.release();
            }
        }
        return units;
    }

    @Override
    long cqMaxPhysicOffset(DefaultMessageStore store, String topic, int queueId) {
        return queue(store, topic, queueId).getMaxPhysicOffset();
    }

    static ConsumeQueue queue(DefaultMessageStore store, String topic, int queueId) {
        ConsumeQueue cq = store.getConsumeQueue(topic, queueId);
        if (cq == null) {
            throw new IllegalStateException("no ConsumeQueue loaded for " + topic + "/" + queueId);
        }
        return cq;
    }
}
